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
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$(cd "$here/../../../.." && pwd)"
repo="${1:-/tmp/sync}"
shift || true
work="${CONFORMANCE_WORK:-/tmp/conformance-catalog}"

if ! command -v bun >/dev/null 2>&1; then
  if [ ! -x "$work/bun/node_modules/.bin/bun" ]; then
    mkdir -p "$work/bun"
    (cd "$work/bun" && npm install --no-audit --no-fund --silent bun@1.3 >/dev/null)
  fi
  PATH="$work/bun/node_modules/.bin:$PATH"
fi

mkdir -p "$work/repo"
(cd "$repo" && tar --exclude=.git --exclude=node_modules -cf - .) | (cd "$work/repo" && tar xf -)
(cd "$work/repo" && bun install --filter '@syncular/conformance' >/dev/null)
mkdir -p "$work/repo/packages/conformance/host-shim"
cp "$here/http-server-driver.ts" "$here/run-catalog.ts" "$work/repo/packages/conformance/host-shim/"

(cd "$module" && go build -o "$work/conformance-host" ./cmd/conformance-host)
"$work/conformance-host" -addr 127.0.0.1:0 >"$work/host.out" 2>"$work/host.err" &
host_pid=$!
trap 'kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  [ -s "$work/host.out" ] && break
  sleep 0.1
done
url="$(head -n1 "$work/host.out")"
echo "conformance-host at $url"
cd "$work/repo/packages/conformance/host-shim"
bun run-catalog.ts "$url" "$@"
