package wiring

import (
	"os"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
)

// todoSchema is the example app's schema, the one the wiring tests build
// engines for.
func todoSchema(t *testing.T) *schema.Schema {
	t.Helper()
	doc, err := os.ReadFile("../../examples/todo/schema.json")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// configWith loads the configuration of a minimal deployment (table,
// bucket, no signed URLs) with one more variable set.
func configWith(t *testing.T, name, value string) *config.Config {
	t.Helper()
	env := map[string]string{"SYNC_TABLE_NAME": "t", "SYNC_BUCKET": "b", "SYNC_SIGNED_URLS": "off", name: value}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
