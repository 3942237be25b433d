package dynamostore_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// TEMPORARY until internal/testenv lands.
func ddbClient(t testing.TB) *dynamodb.Client {
	ep := os.Getenv("DEV_DYNAMO_ENDPOINT")
	if ep == "" {
		t.Skip("no DynamoDB Local")
	}
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ep),
		Credentials:  credentials.NewStaticCredentialsProvider("fake", "fake", ""),
		HTTPClient:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	})
}

func uniqueName(t testing.TB, prefix string) string {
	n := prefix + "-" + strings.ToLower(rand.Text()[:10])
	return n
}

func newTable(t testing.TB, c *dynamodb.Client) string {
	name := uniqueName(t, "tbl")
	if err := dynamostore.CreateTable(context.Background(), c, name); err != nil {
		t.Fatal(err)
	}
	return name
}
