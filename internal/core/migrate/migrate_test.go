package migrate_test

import (
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/migrate/migratetest"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

func TestMigrateOnMemstore(t *testing.T) {
	migratetest.Run(t, func(*testing.T) migrate.Backend { return memstore.New() })
}
