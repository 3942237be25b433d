#!/usr/bin/env bash
# Runs the whole Go test suite. Services the adapter tests need are
# installed and started by the tests' own harness (internal/testenv).
set -euo pipefail
cd "$(dirname "$0")/.."
# The golden vectors are not in the repository (internal/vectors says where
# they come from). Unset variables mean ../shared beside the checkout; a
# test that cannot find them fails. "skip" skips them on purpose.
echo "golden vectors: ${SSP2_VECTORS:-../shared/ssp2-vectors beside the checkout}"
echo "golden vectors (wire v3): ${SSP2_VECTORS_V3:-../shared/ssp2-vectors-v3 beside the checkout}"
for v in SSP2_VECTORS SSP2_VECTORS_V3; do
  if [ "${!v:-}" = skip ]; then echo "WARNING: $v=skip: the golden vector tests are skipped" >&2; fi
done
go test -race -count=1 -timeout 40m ./...
# The Yjs differential test checks 1,000 histories under the race detector
# and all 10,000 here, without it (issue 22).
go test -count=1 -timeout 10m -run '^TestYjsMergerMatchesYjs$' ./internal/core/crdt/yjs/
# A short fuzz pass on every target (seeded with the vectors).
./scripts/fuzz.sh "${FUZZ_SMOKE:-5s}"
