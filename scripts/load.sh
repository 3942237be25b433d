#!/usr/bin/env bash
# Starts a fresh local runner (in-memory store) and drives it with
# cmd/syncular-load; prints the load tool's table and stops the runner.
#
#   scripts/load.sh [syncular-load flags…]    e.g. -mix quiet-pull -vus 10,50,100 -runs 3
#
# Environment: LOAD_ADDR (default 127.0.0.1:8797), LOAD_PPROF (e.g.
# 127.0.0.1:6060, off by default), LOAD_LOG (where the runner's request
# lines go, default /dev/null), RUNNER_FLAGS (extra runner flags).
set -euo pipefail
cd "$(dirname "$0")/.."
addr=${LOAD_ADDR:-127.0.0.1:8797}
log=${LOAD_LOG:-/dev/null}
secret=load-secret-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/runner" ./cmd/syncular-local
go build -o "$bin/load" ./cmd/syncular-load
pprof=()
if [[ -n ${LOAD_PPROF:-} ]]; then pprof=(-pprof "$LOAD_PPROF"); fi
# shellcheck disable=SC2086
"$bin/runner" -addr "$addr" -secret "$secret" "${pprof[@]}" ${RUNNER_FLAGS:-} >"$bin/banner" 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$bin"' EXIT
for _ in $(seq 100); do
	grep -q 'Ctrl-C stops' "$bin/banner" 2>/dev/null && break
	kill -0 "$pid" 2>/dev/null || { echo "runner exited"; exit 1; }
	sleep 0.1
done
grep pprof "$bin/banner" || true
"$bin/load" -url "http://$addr" -secret "$secret" -pid "$pid" "$@"
