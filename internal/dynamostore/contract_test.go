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

// TestContractLogIndexOn runs the log-index parts of the contract on
// partitions created with the index on (new partitions start without it
// until a pull shows them wide, logindex.go), so both read paths of
// ReadLogScoped and Prune's entry deletes meet the contract.
func TestContractLogIndexOn(t *testing.T) {
	c := ddbClient(t)
	storetest.RunStore(t, func(t *testing.T) store.Store {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{IndexNewPartitions: true})
	})
}

// TestContractScopeCopiesOn runs the contract on partitions created with
// scope copies on and marked (new partitions start without them until a
// bootstrap shows them wide, scopeindex.go), so ScanScopedRows' read of
// the copies, and the copies every commit path writes, meet the contract
// as its read of the row items does in TestContract.
func TestContractScopeCopiesOn(t *testing.T) {
	c := ddbClient(t)
	storetest.RunStore(t, func(t *testing.T) store.Store {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{ScopeCopiesNewPartitions: true})
	})
}

// TestContractTransactionalCommits runs the contract with every commit
// in one transaction (Options.TransactionalCommits; the default writes
// small commits without one, fast.go).
func TestContractTransactionalCommits(t *testing.T) {
	c := ddbClient(t)
	storetest.RunStore(t, func(t *testing.T) store.Store {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{TransactionalCommits: true})
	})
}

// TestSchemaContract runs the rolling-upgrade contract, one fresh table
// per subtest (the schema marker is table-wide).
func TestSchemaContract(t *testing.T) {
	c := ddbClient(t)
	storetest.RunSchemaStore(t, func(t *testing.T) storetest.SchemaBackend {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	})
}

// TestLeaseStoreContract runs the auth-lease contract (§7.3), one fresh
// table per subtest.
func TestLeaseStoreContract(t *testing.T) {
	c := ddbClient(t)
	storetest.RunLeaseStore(t, func(t *testing.T) store.LeaseStore {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	})
}
