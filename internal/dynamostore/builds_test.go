package dynamostore_test

import (
	"context"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// The build registry answers, per function, the newest registered build
// past a schema version; a later build of the same schema replaces the
// earlier one, and functions never see each other's builds.
func TestBuildRegistry(t *testing.T) {
	ctx := context.Background()
	c := ddbClient(t)
	s := dynamostore.New(c, newTable(t, c), dynamostore.Options{})
	newest := func(fn string, above int64) (store.Build, bool) {
		t.Helper()
		b, ok, err := s.NewestBuild(ctx, fn, above)
		if err != nil {
			t.Fatal(err)
		}
		return b, ok
	}
	if _, ok := newest("push", 0); ok {
		t.Fatal("an empty registry named a build")
	}
	for _, b := range []store.Build{
		{Function: "push", SchemaVersion: 1, Version: "7"},
		{Function: "push", SchemaVersion: 2, Version: "8"},
		{Function: "push", SchemaVersion: 2, Version: "8"}, // the next cold start: no change
		{Function: "pull#x", SchemaVersion: 3, Version: "4"},
		{Function: "push", SchemaVersion: 10, Version: "9"},
		{Function: "push", SchemaVersion: 10, Version: "11"}, // a later build of schema 10
	} {
		if err := s.RegisterBuild(ctx, b); err != nil {
			t.Fatalf("register %+v: %v", b, err)
		}
	}
	if b, ok := newest("push", 1); !ok || b != (store.Build{Function: "push", SchemaVersion: 10, Version: "11"}) {
		t.Fatalf("newest push past schema 1: %+v %t, want version 11 at schema 10 (numeric order, replaced)", b, ok)
	}
	if _, ok := newest("push", 10); ok {
		t.Fatal("a build past the newest schema")
	}
	if b, ok := newest("pull#x", 0); !ok || b.Version != "4" || b.SchemaVersion != 3 {
		t.Fatalf("pull#x: %+v %t", b, ok)
	}
	if _, ok := newest("pull", 0); ok {
		t.Fatal("another function's build")
	}
	if err := s.RegisterBuild(ctx, store.Build{Function: "push", SchemaVersion: 0, Version: "1"}); err == nil {
		t.Fatal("registered a build without a schema version")
	}
}
