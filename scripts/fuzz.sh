#!/usr/bin/env bash
# Runs each fuzz target for the given duration (default 30s).
set -euo pipefail
cd "$(dirname "$0")/.."
t="${1:-30s}"
for pkg in $(go list ./internal/...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($t)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >/tmp/fuzz-$$.log 2>&1 || { cat /tmp/fuzz-$$.log; exit 1; }
    tail -1 /tmp/fuzz-$$.log
  done
done
