#!/usr/bin/env bash
# Runs the public Syncular conformance catalog (TS client × this Go engine
# behind cmd/conformance-host). Not part of `go test` or CI: it needs a
# checkout of the syncular repository and packages from the npm registry.
#
#   internal/conformancehost/testdata/catalog/run.sh [SYNC_REPO] [name-filter...]
#
# SYNC_REPO (default /tmp/sync) is read-only: it is copied to a scratch
# dir, where bun (installed from npm if absent) installs the catalog's
# dependencies. Exit status is the catalog's (0 = no failures).
#
# Environment:
#   CATALOG_STORE=dynamodb   run the host on the production stores
#                            (DynamoDB Local, started by the host; default
#                            memory)
#   CATALOG_REPEAT=N         run the selected scenarios N times in a row
#   CATALOG_TIMEOUT_S=S      per-scenario timeout (default 60): a scenario
#                            that exceeds it fails and the run goes on
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$(cd "$here/../../../.." && pwd)"
repo="${1:-/tmp/sync}"
shift || true
work="${CONFORMANCE_WORK:-/tmp/conformance-catalog}"

# shellcheck source=/dev/null
. "$module/scripts/reference-workspace.sh"
reference_workspace "$work" "$repo" '@syncular/conformance'
mkdir -p "$work/repo/packages/conformance/host-shim"
cp "$here/http-server-driver.ts" "$here/run-catalog.ts" "$work/repo/packages/conformance/host-shim/"

(cd "$module" && go build -o "$work/conformance-host" ./cmd/conformance-host)
store="${CATALOG_STORE:-memory}"
: >"$work/host.out"
"$work/conformance-host" -addr 127.0.0.1:0 -store "$store" -repo "$module" >"$work/host.out" 2>"$work/host.err" &
host_pid=$!
trap 'kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true' EXIT
# DynamoDB Local (a JVM) can take a minute to start on a busy machine.
for _ in $(seq 1200); do
  [ -s "$work/host.out" ] && break
  if ! kill -0 "$host_pid" 2>/dev/null; then
    echo "conformance-host exited:" >&2
    cat "$work/host.err" >&2
    exit 1
  fi
  sleep 0.1
done
url="$(head -n1 "$work/host.out")"
echo "conformance-host ($store stores) at $url"
cd "$work/repo/packages/conformance/host-shim"
bun run-catalog.ts "$url" "$@"
