package dynamostore_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/migrate/migratetest"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// TestMigrateOverDynamoDB runs the migration step and backfill runner
// scenarios on DynamoDB Local, one fresh table each.
func TestMigrateOverDynamoDB(t *testing.T) {
	c := ddbClient(t)
	migratetest.Run(t, func(t *testing.T) migrate.Backend {
		return dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	})
}
