package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/golang-jwt/jwt/v5"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/auth/authtest"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// The realtime function binary under the Lambda emulator in the deployed
// default mode (SYNC_AUTH_MODE=jwt-authorizer, no authorizer on $connect):
// it discovers the local issuer's keys over HTTPS and accepts an RS256
// token in ?token= for one of SYNC_JWT_AUDIENCE's audiences, writing the
// connection item; a token for another audience is a 401 that writes
// nothing.
func TestRealtimeFunctionVerifiesOIDCTokenUnderEmulator(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := ddb.Client(t)
	table := testenv.UniqueName(t, "rtoidc")
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	is := authtest.NewIssuer(t)

	env := envLocal(t)
	env["SYNC_AUTH_MODE"] = "jwt-authorizer"
	delete(env, "SYNC_HS256_SECRET")
	env["SYNC_JWT_ISSUER"] = is.URL()
	env["SYNC_JWT_AUDIENCE"] = "web,mobile"
	env["SSL_CERT_FILE"] = is.CertFile(t) // the function trusts the local issuer
	env["SYNC_DYNAMODB_ENDPOINT"] = ddb.Endpoint
	env["SYNC_S3_ENDPOINT"] = "http://127.0.0.1:1"
	env["SYNC_TABLE_NAME"] = table
	env["SYNC_REALTIME_ENDPOINT"] = "http://127.0.0.1:1/realtime" // $connect posts nothing
	schemaJSON, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildFunction(t, "./"+app.RealtimeJob.Dir)
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), schemaJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	rie := testenv.LambdaRIE(t, bin, env)

	connect := func(connID, tok string) events.APIGatewayProxyResponse {
		t.Helper()
		ev := events.APIGatewayWebsocketProxyRequest{
			QueryStringParameters: map[string]string{"token": tok, "clientId": "reader"},
			RequestContext: events.APIGatewayWebsocketProxyRequestContext{
				RouteKey: "$connect", EventType: "CONNECT", ConnectionID: connID, RequestID: "rt-" + connID, Stage: "realtime",
			},
		}
		out, err := rie.Invoke(ctx, apptest.MustJSON(t, ev))
		var resp events.APIGatewayProxyResponse
		if err != nil || strings.Contains(string(out), "errorMessage") || json.Unmarshal(out, &resp) != nil {
			t.Fatalf("$connect: %v %s\n%s", err, out, rie.Logs())
		}
		return resp
	}
	has := func(connID string) bool {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: dynamostore.Key("RTC#"+connID, "C"), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item != nil
	}
	sign := func(aud string) string {
		return authtest.Sign(t, jwt.SigningMethodRS256, "k1", is.Key, jwt.MapClaims{
			"iss": is.URL(), "aud": aud, "sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()})
	}

	if resp := connect("conn-other", sign("other")); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong audience: HTTP %d %s, want 401", resp.StatusCode, resp.Body)
	}
	if resp := connect("conn-ok", sign("mobile")); resp.StatusCode != http.StatusOK {
		t.Fatalf("valid token: HTTP %d %s\n%s", resp.StatusCode, resp.Body, rie.Logs())
	}
	if has("conn-other") || !has("conn-ok") {
		t.Fatalf("connection items: refused %v, accepted %v", has("conn-other"), has("conn-ok"))
	}
	if is.Fetches() != 1 {
		t.Fatalf("JWKS fetched %d times, want 1 (kept between invocations)", is.Fetches())
	}
}
