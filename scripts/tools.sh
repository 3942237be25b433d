#!/usr/bin/env bash
# Installs the Go tools the checks need into .tools/bin, from the Go module
# proxy, once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/.tools/bin"
mkdir -p "$bin"
if [ ! -x "$bin/staticcheck" ]; then
  GOBIN="$bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
