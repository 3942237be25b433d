package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/storetest"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// TestContract runs the shared store contract against DynamoDB Local,
// one fresh table per subtest.
func TestContract(t *testing.T) {
	c := ddbClient(t)
	storetest.RunStore(t, func(t *testing.T) store.Store {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	})
}
