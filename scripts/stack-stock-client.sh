#!/usr/bin/env bash
# Runs two stock Syncular web clients (the public repository's
# @syncular/client at SYNC_REPO, default /tmp/sync: 0.15.48, wire 2) against
# `make stack`: both sync through the local API Gateway and connect their
# realtime sockets with the client's own webSocketRealtimeConnector to the
# stack's one /realtime address; each must see the other's commits.
# Not part of `go test`: it needs that checkout and packages from npm.
#
#   scripts/stack-stock-client.sh [SYNC_REPO]
#
# SYNC_REPO is read-only: it is copied to a scratch dir (STACK_CLIENT_WORK,
# default /tmp/stack-stock-client), where bun (installed from npm if absent)
# installs the client's dependencies. Exit status is the clients' (0 = both
# saw every commit).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$(cd "$here/.." && pwd)"
repo="${1:-/tmp/sync}"
work="${STACK_CLIENT_WORK:-/tmp/stack-stock-client}"

# shellcheck source=/dev/null
. "$module/scripts/reference-workspace.sh"
reference_workspace "$work" "$repo" '@syncular/client'
mkdir -p "$work/repo/packages/web-client/stack-shim"
cp "$here/stack-stock-client/two-clients.ts" "$work/repo/packages/web-client/stack-shim/"

(cd "$module" && go build -o "$work/syncular-stack" ./cmd/syncular-stack)
"$work/syncular-stack" -port 0 -quiet >"$work/stack.out" 2>"$work/stack.err" &
stack_pid=$!
trap 'kill -INT "$stack_pid" 2>/dev/null || true; wait "$stack_pid" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q '^  dev token ' "$work/stack.out" 2>/dev/null && break
  kill -0 "$stack_pid" 2>/dev/null || { cat "$work/stack.err" >&2; exit 1; }
  sleep 0.5
done
base="$(awk '/^  base URL/ {print $3}' "$work/stack.out")"
rt="$(awk '/^  realtime URL/ {print $3}' "$work/stack.out")"
token="$(awk '/^  dev token / {print $3}' "$work/stack.out")"
echo "make stack at $base, realtime $rt"
cd "$work/repo/packages/web-client/stack-shim"
bun two-clients.ts "$base" "$rt" "$token" "$module/examples/todo/schema.json"
