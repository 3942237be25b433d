#!/usr/bin/env bash
# Side-by-side push-pull measurement: the reference server and this
# repository's local runner, both driven by the reference repository's own
# load generator (load/ of syncular/syncular), interleaved in one window.
# Loopback only; every run is bounded by DURATION seconds.
#
#   scripts/sidebyside.sh SYNC_REPO [VUS...]
#
# SYNC_REPO (a checkout of syncular/syncular) is read-only: it is copied to
# WORK (default /tmp/sidebyside-work), where bun (installed from npm when
# absent) installs the load workspace. In the copy, two small edits let the
# generator target a server it did not spawn: SYNCULAR_LOAD_TARGET replaces
# the spawned server, SYNCULAR_LOAD_TOKEN adds a bearer token to /sync.
# Each run gets a fresh server process; its CPU (utime+stime from
# /proc/PID/stat) over the run divided by the generator's rounds is the CPU
# per round, VmHWM its peak RSS.
#
# Env: RUNS (interleaved repetitions, default 3), DURATION (s, default 10).
# Output: one tab-separated line per run on stdout.
set -euo pipefail

repo="${1:?usage: sidebyside.sh SYNC_REPO [VUS...]}"
shift
vus_list=("$@")
[ ${#vus_list[@]} -gt 0 ] || vus_list=(10 50 100)
runs="${RUNS:-3}"
duration="${DURATION:-10}"
work="${WORK:-/tmp/sidebyside-work}"
module="$(cd "$(dirname "$0")/.." && pwd)"
port_ref=8797
port_go=8798
secret=sidebyside-secret-0123456789abcdef

# shellcheck source=/dev/null
. "$module/scripts/reference-workspace.sh"
ensure_bun "$work"

rm -rf "$work/repo"
mkdir -p "$work/repo"
(cd "$repo" && tar --exclude=.git --exclude=node_modules --exclude=results -cf - .) | (cd "$work/repo" && tar xf -)
(cd "$work/repo" && bun install --filter '@syncular/load' >/dev/null)
load="$work/repo/load"
mkdir -p "$load/results"

# Edit 1: an external target instead of a spawned server.
cat >"$load/src/external-target.ts" <<'EOF'
// Added by sidebyside.sh: a LoadServer for a server this process did not start.
export function externalTarget(baseUrl: string) {
  const zero = { p50: 0, p95: 0, p99: 0 };
  return {
    baseUrl,
    async metrics() {
      return {
        rssBytes: 0, peakRssBytes: 0, requests: 0, requestErrors: 0,
        requestDurationMs: zero, segmentsBuilt: 0, segmentsReused: 0,
        pushApplied: 0, pushConflicted: 0, pushRejected: 0,
        realtimeDeltas: 0, realtimeWakes: 0, realtimeOpened: 0,
        realtimeClosed: 0, pruneRuns: 0, pruneRemovedCommits: 0,
      };
    },
    async prune() { return 0; },
    async stop() {},
  };
}
EOF
perl -0pi -e 's/(export async function spawnServer\([^)]*\)[^{]*\{)/import { externalTarget } from ".\/external-target";\n$1\n  if (process.env.SYNCULAR_LOAD_TARGET) return externalTarget(process.env.SYNCULAR_LOAD_TARGET);/' "$load/src/harness.ts"
grep -q externalTarget "$load/src/harness.ts" || { echo "harness edit failed" >&2; exit 1; }
# Edit 2: a bearer token on /sync.
perl -pi -e "s/headers: \{ 'Content-Type': SSP2_CONTENT_TYPE \}/headers: { 'Content-Type': SSP2_CONTENT_TYPE, ...(process.env.SYNCULAR_LOAD_TOKEN ? { Authorization: 'Bearer ' + process.env.SYNCULAR_LOAD_TOKEN } : {}) }/" "$load/src/vclient.ts"
grep -q SYNCULAR_LOAD_TOKEN "$load/src/vclient.ts" || { echo "vclient edit failed" >&2; exit 1; }
# Edit 3: remember the partition's log epoch from RESP_HEADER and send it
# back (§2.1: only an epoch-acquisition request may omit it, and it must
# carry no push).
perl -0pi -e 's/(function requestBytes\()/const epochs = new Map<string, string>();\n$1/; s/(\{ type: .REQ_HEADER., clientId, schemaVersion: SCHEMA\.version)( \})/$1, ...(epochs.has(clientId) ? { logEpoch: epochs.get(clientId) } : {})$2/; s/(const decoded = decodeMessage\(bytes\);)/$1\n    for (const f of decoded.frames) if (f.type === "RESP_HEADER" \&\& f.logEpoch) epochs.set(this.clientId, f.logEpoch);/g' "$load/src/vclient.ts"
grep -q 'logEpoch: epochs' "$load/src/vclient.ts" || { echo "vclient epoch edit failed" >&2; exit 1; }

# The load fixture's table, as this repository's schema file.
cat >"$work/schema.json" <<'EOF'
{
  "version": 1,
  "tables": [
    {
      "name": "tasks",
      "columns": [
        { "name": "id", "type": "string", "nullable": false },
        { "name": "project_id", "type": "string", "nullable": false },
        { "name": "title", "type": "string", "nullable": false },
        { "name": "done", "type": "boolean", "nullable": false },
        { "name": "priority", "type": "integer", "nullable": false },
        { "name": "updated_at_ms", "type": "integer", "nullable": false }
      ],
      "primaryKey": "id",
      "scopes": ["project:{project_id}"]
    }
  ]
}
EOF
(cd "$module" && go build -o "$work/syncular-local" ./cmd/syncular-local)

wait_port() { # pid port
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
hwm_kb() { awk '/^VmHWM/{print $2}' "/proc/$1/status"; }

server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

one_run() { # name vus run
  local name=$1 vus=$2 run=$3 port token=""
  if [ "$name" = ref ]; then
    port=$port_ref
    (cd "$load" && SYNCULAR_LOAD_PORT=$port exec bun src/server.ts) >/dev/null 2>"$work/ref.err" &
  else
    port=$port_go
    "$work/syncular-local" -addr "127.0.0.1:$port" -secret "$secret" -schema "$work/schema.json" \
      -partition load -log-level error -scopes '{"project_id":["*"]}' >"$work/go.out" 2>"$work/go.err" &
  fi
  server_pid=$!
  wait_port "$server_pid" "$port" || { echo "$name server did not start" >&2; cat "$work/$name.err" >&2; exit 1; }
  if [ "$name" = go ]; then
    for _ in $(seq 50); do grep -q "dev token" "$work/go.out" && break; sleep 0.1; done
    token=$(awk '/dev token/{print $3; exit}' "$work/go.out")
  fi
  local c0 l0 l1 c1 hwm json
  c0=$(cpu_ticks "$server_pid")
  l0=$(cut -d' ' -f1 /proc/loadavg)
  rm -f "$load/results"/*.json
  (cd "$load" && SYNCULAR_LOAD_TARGET="http://127.0.0.1:$port" SYNCULAR_LOAD_TOKEN="$token" \
    bun src/index.ts push-pull --vus "$vus" --duration "$duration") >"$work/last-$name.log" 2>&1 || true
  c1=$(cpu_ticks "$server_pid")
  l1=$(cut -d' ' -f1 /proc/loadavg)
  hwm=$(hwm_kb "$server_pid")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
  json=$(ls "$load/results"/*.json 2>/dev/null | head -1 || true)
  if [ -z "$json" ]; then echo "$name $vus: no result" >&2; cat "$work/last-$name.log" >&2; return; fi
  local hz
  hz=$(getconf CLK_TCK)
  jq -r --arg name "$name" --arg run "$run" --argjson dcpu $((c1 - c0)) --argjson hz "$hz" \
    --arg hwm "$hwm" --arg load "$l0→$l1" '
    (.latencies[] | select(.name == "round")) as $r |
    [$name, .config.vus, $run, .extra.totalRounds, .extra.opsPerSec,
     (($r.p50 // 0)*100|round/100), (($r.p95 // 0)*100|round/100), (($r.p99 // 0)*100|round/100),
     (if .extra.totalRounds > 0 then ($dcpu / $hz * 1e6 / .extra.totalRounds | round) else "-" end),
     (($hwm|tonumber) / 1024 | round), .failedVus, $load] | @tsv' "$json"
}

printf 'server\tvus\trun\trounds\tops/s\tp50ms\tp95ms\tp99ms\tcpu_us/round\tpeakRSS_MB\tfailedVUs\tloadavg\n'
for run in $(seq "$runs"); do
  for vus in "${vus_list[@]}"; do
    for name in ref go; do
      one_run "$name" "$vus" "$run"
    done
  done
done
