package functions

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// A request that would outlive the function timeout (DynamoDB accepts the
// connection and never answers) is stopped by the soft deadline: the
// function still answers with a retryable SSP2 error and writes its
// request line, with the partition, the error code and the softTimeouts
// metric, before Lambda's own timeout would have killed it silently.
func TestSoftDeadlineUnderEmulator(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // accept and hold every connection, never answering
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	bin := testenv.BuildFunction(t, "./functions/pull")
	schema, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "schema.json"), schema, 0o644); err != nil {
		t.Fatal(err)
	}
	env := envLocal(t)
	env["SYNC_DYNAMODB_ENDPOINT"] = "http://" + ln.Addr().String()
	env["SYNC_S3_ENDPOINT"] = "http://" + ln.Addr().String()
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "4"
	rie := testenv.LambdaRIE(t, bin, env)
	ev, err := os.ReadFile(filepath.Join(eventsDir, "pull.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	out, err := rie.Invoke(ctx, ev)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v\n%s", err, rie.Logs())
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode < 400 {
		t.Fatalf("want an error response document before the timeout, got %s (after %v)\n%s", out, took, rie.Logs())
	}
	// The engine's storage-timeout error (sync.internal_error, which a
	// wire-1 client like the sample event's sees in its ForWire form).
	var e struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &e); err != nil || !e.Retryable || !strings.HasPrefix(e.Code, "sync.") {
		t.Errorf("body %s, want a retryable SSP2 error", resp.Body)
	}
	if took > 4*time.Second {
		t.Errorf("answered after %v, past the 4 s function timeout", took)
	}
	var line []byte
	for _, l := range strings.Split(rie.WaitLogs(`"msg":"request"`, 10*time.Second), "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			line = []byte(l)
		}
	}
	if line == nil {
		t.Fatalf("no request line:\n%s", rie.Logs())
	}
	doc, err := metrics.Parse(line)
	if err != nil {
		t.Fatalf("%v\n%s", err, line)
	}
	if doc["partition"] != "default" || doc["errorCode"] != e.Code || doc["deadlineExceeded"] != true {
		t.Errorf("request line lacks partition/errorCode/deadlineExceeded: %s", line)
	}
	if n, _ := doc.Number("softTimeouts"); n != 1 {
		t.Errorf("softTimeouts = %v: %s", n, line)
	}
	t.Logf("answered after %v: %s", took.Round(time.Millisecond), line)
}
