#!/usr/bin/env bash
# Runs each fuzz target for the given duration (default 30s).
#
# Go's fuzzer sometimes ends a run with a bare "context deadline exceeded"
# (no failing input written) when the time limit falls while a worker is
# busy, most often on a loaded machine; such a run is tried once more.
# A run that found a failing input is never retried.
set -euo pipefail
cd "$(dirname "$0")/.."
t="${1:-30s}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() { go test -run '^$' -fuzz "^${2}\$" -fuzztime "$t" "$1" >"$log" 2>&1; }
for pkg in $(go list ./internal/...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($t)"
    if ! run "$pkg" "$target"; then
      if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
        echo "fuzz $pkg $target: the fuzzer's deadline fell mid-run; once more"
        run "$pkg" "$target" || { cat "$log"; exit 1; }
      else
        cat "$log"
        exit 1
      fi
    fi
    tail -1 "$log"
  done
done
