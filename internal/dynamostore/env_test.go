package dynamostore_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ddbClient returns a new SDK client (its own connection pool: a
// separate "Lambda instance") for the shared DynamoDB Local.
func ddbClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	return testenv.DynamoDB(t).Client(t)
}

// newTable creates a fresh table named after the test, at this build's
// store-format level: a stack after its deploy's post-traffic hook
// (formats.go), so small commits and compressed log bodies are what the
// tests exercise.
func newTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := testenv.UniqueName(t, "ds")
	if err := dynamostore.CreateTable(context.Background(), c, name); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamostore.New(c, name, dynamostore.Options{}).RaiseFormatLevel(context.Background()); err != nil {
		t.Fatal(err)
	}
	return name
}
