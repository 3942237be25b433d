package dynamostore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// The build registry (store.BuildRegistry): one small item per function
// and schema version,
//
//	item            pk               sk                 attributes
//	build           BLD#<function>   S<schema:020d>     ver (S), upd (N, ms)
//
// written once per cold start of a build that serves (a conditional put
// that fails cheaply when the item already names it) and read only by an
// older build a partition's writer fence refused, which caches what it
// read (app.Forwarder). No request path reads or writes it otherwise.

var _ store.BuildRegistry = (*Store)(nil)

const (
	buildVersion = "ver"
	buildUpdated = "upd"
)

func buildPK(function string) string { return "BLD#" + esc(function) }
func buildSK(schemaVersion int64) string {
	return fmt.Sprintf("S%020d", schemaVersion)
}

// RegisterBuild implements store.BuildRegistry.
func (s *Store) RegisterBuild(ctx context.Context, b store.Build) error {
	if b.Function == "" || b.Version == "" || b.SchemaVersion < 1 {
		return fmt.Errorf("dynamostore: register build: function, version and a schema version ≥ 1 are required (got %+v)", b)
	}
	item := Key(buildPK(b.Function), buildSK(b.SchemaVersion))
	item[buildVersion] = S(b.Version)
	item[buildUpdated] = N(time.Now().UnixMilli())
	err := s.putItem(ctx, "register build", item, "attribute_not_exists(pk) OR ver <> :v", map[string]types.AttributeValue{":v": S(b.Version)})
	if isConditionFailed(err) {
		return nil // recorded already
	}
	return err
}

// NewestBuild implements store.BuildRegistry: one Query, newest first,
// of at most one item.
func (s *Store) NewestBuild(ctx context.Context, function string, schemaVersion int64) (store.Build, bool, error) {
	var found store.Build
	var ok bool
	var parseErr error
	err := s.query(ctx, "read build registry", &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND sk > :sk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": S(buildPK(function)), ":sk": S(buildSK(schemaVersion)),
		},
		ScanIndexForward: aws.Bool(false),
		Limit:            aws.Int32(1),
	}, func(items []map[string]types.AttributeValue) bool {
		sk, _ := getS(items[0], "sk")
		ver, _ := getS(items[0], buildVersion)
		v, err := strconv.ParseInt(strings.TrimPrefix(sk, "S"), 10, 64)
		if err != nil || ver == "" {
			parseErr = fmt.Errorf("dynamostore: build registry item %q of %q is malformed", sk, function)
			return false
		}
		found, ok = store.Build{Function: function, SchemaVersion: v, Version: ver}, true
		return false
	})
	if err != nil {
		return store.Build{}, false, err
	}
	if parseErr != nil {
		return store.Build{}, false, parseErr
	}
	return found, ok, nil
}
