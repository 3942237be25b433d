#!/usr/bin/env bash
# Runs the whole Go test suite. Services the adapter tests need are
# installed and started by the tests' own harness (internal/testenv).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${SSP2_VECTORS:-}" ]; then echo "golden vectors: $SSP2_VECTORS"; fi
if [ -n "${SSP2_VECTORS_V3:-}" ]; then echo "golden vectors (wire v3): $SSP2_VECTORS_V3"; fi
go test -race -count=1 -timeout 40m ./...
# A short fuzz pass on every target (seeded with the vectors).
./scripts/fuzz.sh "${FUZZ_SMOKE:-5s}"
