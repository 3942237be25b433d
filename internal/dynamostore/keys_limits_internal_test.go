package dynamostore

import (
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/limits"
)

// Every key built from identifiers at their limits (the worst case: all
// '#', which escaping triples) fits DynamoDB's key sizes, so the engine's
// identifier limits are enough for this store.
func TestIdentifierLimitsFitTheKeys(t *testing.T) {
	p := strings.Repeat("#", limits.MaxPartitionBytes)
	client := strings.Repeat("#", limits.MaxClientIDBytes)
	table := strings.Repeat("#", limits.MaxTableNameBytes)
	pks := map[string]string{
		"head": headPK(p), "log": logPK(p), "outcome": outcomePK(p, client),
		"row": rowPK(p, table), "client": clientPK(p),
	}
	for name, pk := range pks {
		if len(pk) > limits.DynamoPartitionKeyBytes {
			t.Errorf("%s partition key is %d bytes, over %d", name, len(pk), limits.DynamoPartitionKeyBytes)
		}
	}
	sks := map[string]string{
		"outcome": outcomeSK(strings.Repeat("#", limits.MaxClientCommitIDBytes)),
		"row":     rowSK(strings.Repeat("#", limits.MaxRowIDBytes)),
		"client":  clientSK(client),
	}
	for name, sk := range sks {
		if len(sk) > limits.DynamoSortKeyBytes {
			t.Errorf("%s sort key is %d bytes, over %d", name, len(sk), limits.DynamoSortKeyBytes)
		}
	}
	if err := checkPartition(p); err != nil {
		t.Errorf("partition at the limit: %v", err)
	}
	if err := checkOutcomeKey(p, client, strings.Repeat("#", limits.MaxClientCommitIDBytes)); err != nil {
		t.Errorf("idempotency key at the limits: %v", err)
	}
}
