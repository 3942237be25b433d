// The harness tests check process cleanup through /proc and Pdeathsig,
// which exist only on Linux (the only platform the Lambdas target).

//go:build linux

package testenv

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// orphanHelperEnv makes the test binary act as a parent that starts a child
// and is then SIGKILLed, for TestChildDiesWithParent.
const orphanHelperEnv = "TESTENV_ORPHAN_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(orphanHelperEnv) == "1" {
		orphanHelper()
		return
	}
	Main(m)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9-]{2,62}$`)
	seen := map[string]bool{}
	for _, prefix := range []string{"tbl", "", "9Bucket", "Some_Very.Long/Prefix_That_Goes_On_And_On_And_On"} {
		for range 3 {
			n := UniqueName(t, prefix)
			if !valid.MatchString(n) || strings.Contains(n, "--") || strings.HasSuffix(n, "-") {
				t.Errorf("UniqueName(%q) = %q: not a valid table/bucket name", prefix, n)
			}
			if seen[n] {
				t.Errorf("UniqueName(%q) repeated %q", prefix, n)
			}
			seen[n] = true
		}
	}
	t.Run(strings.Repeat("deeply nested subtest name ", 5), func(t *testing.T) {
		if n := UniqueName(t, "rows"); !valid.MatchString(n) {
			t.Errorf("UniqueName in subtest = %q (len %d)", n, len(n))
		}
	})
}

func TestDynamoDBRoundTrip(t *testing.T) {
	d := DynamoDB(t)
	t.Logf("DynamoDB Local at %s: install script %v, start-to-ready %v", d.Endpoint, d.InstallTime, d.StartupTime)
	db := d.Client(t)
	table := UniqueName(t, "tbl")
	_, err := db.CreateTable(ctx(t), &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	item := map[string]types.AttributeValue{
		"pk":   &types.AttributeValueMemberS{Value: "row-1"},
		"n":    &types.AttributeValueMemberN{Value: "42"},
		"blob": &types.AttributeValueMemberB{Value: []byte{0, 1, 2, 255}},
	}
	if _, err := db.PutItem(ctx(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	got, err := db.GetItem(ctx(t), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "row-1"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	if n, ok := got.Item["n"].(*types.AttributeValueMemberN); !ok || n.Value != "42" {
		t.Errorf("GetItem n = %#v, want N 42", got.Item["n"])
	}
	if b, ok := got.Item["blob"].(*types.AttributeValueMemberB); !ok || !bytes.Equal(b.Value, []byte{0, 1, 2, 255}) {
		t.Errorf("GetItem blob = %#v", got.Item["blob"])
	}

	// An error response (no X-Amz-Crc32 from DynamoDB Local) must surface
	// as the typed service error, not as a checksum failure.
	_, err = db.PutItem(ctx(t), &dynamodb.PutItemInput{
		TableName:           aws.String(table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("conditional PutItem on an existing key: got %v, want ConditionalCheckFailedException", err)
	}

	// Another test's table is invisible by name, so tests sharing the
	// server stay isolated.
	_, err = db.DescribeTable(ctx(t), &dynamodb.DescribeTableInput{TableName: aws.String(UniqueName(t, "tbl"))})
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("DescribeTable of an unknown table: got %v, want ResourceNotFoundException", err)
	}
}

// TestDynamoDBStop checks that a DynamoDB Local we start is really gone
// after stop, using a private instance so the shared one keeps serving.
func TestDynamoDBStop(t *testing.T) {
	shared := DynamoDB(t) // also proves the install is there
	_ = shared
	dir, err := runInstallScript("testenv-dynamodb.sh", dynamoInstallTimeout)
	if err != nil {
		t.Fatal(err)
	}
	d, err := launchDynamo(dir)
	if err != nil {
		t.Fatal(err)
	}
	pid := d.cmd.Process.Pid
	d.stop()
	select {
	case <-d.done:
	default:
		t.Fatalf("DynamoDB Local pid %d still running after stop", pid)
	}
	if running(pid) {
		t.Fatalf("pid %d still running after stop", pid)
	}
}

func TestS3PutGetConditional(t *testing.T) {
	srv := S3(t)
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("S3 endpoint %s is not on loopback", srv.Endpoint)
	}
	c := srv.Client(t)
	bucket := UniqueName(t, "bkt")
	srv.CreateBucket(t, bucket)

	put := func(key, body string, ifNoneMatch, ifMatch *string) (*s3.PutObjectOutput, error) {
		return c.PutObject(ctx(t), &s3.PutObjectInput{
			Bucket:      aws.String(bucket),
			Key:         aws.String(key),
			Body:        strings.NewReader(body), // seekable, as gofakes3 needs
			IfNoneMatch: ifNoneMatch,
			IfMatch:     ifMatch,
		})
	}
	get := func(key string) string {
		t.Helper()
		out, err := c.GetObject(ctx(t), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GetObject %s: %v", key, err)
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	wantPrecondition := func(what string, err error) {
		t.Helper()
		var apiErr smithy.APIError
		var respErr *awshttp.ResponseError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "PreconditionFailed" ||
			!errors.As(err, &respErr) || respErr.HTTPStatusCode() != http.StatusPreconditionFailed {
			t.Fatalf("%s: got %v, want 412 PreconditionFailed", what, err)
		}
	}

	first, err := put("seg/1", "first", aws.String("*"), nil)
	if err != nil {
		t.Fatalf("If-None-Match: * PUT of a new key: %v", err)
	}
	if got := get("seg/1"); got != "first" {
		t.Fatalf("GetObject = %q, want %q", got, "first")
	}

	// The segment store relies on this to never overwrite a segment.
	_, err = put("seg/1", "second", aws.String("*"), nil)
	wantPrecondition("second If-None-Match: * PUT", err)
	if got := get("seg/1"); got != "first" {
		t.Fatalf("after rejected PUT, GetObject = %q, want %q", got, "first")
	}

	_, err = put("seg/1", "third", nil, aws.String(`"0123456789abcdef0123456789abcdef"`))
	wantPrecondition("If-Match with a stale ETag", err)
	if _, err := put("seg/1", "fourth", nil, first.ETag); err != nil {
		t.Fatalf("If-Match with the current ETag: %v", err)
	}
	if got := get("seg/1"); got != "fourth" {
		t.Fatalf("after If-Match PUT, GetObject = %q, want %q", got, "fourth")
	}

	// Servers are per test: a second one does not see this bucket.
	other := S3(t)
	_, err = other.Client(t).HeadBucket(ctx(t), &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	if err == nil {
		t.Fatal("a fresh S3 server already has another test's bucket")
	}
}

func TestLambdaRIEEcho(t *testing.T) {
	buildStart := time.Now()
	bootstrap := BuildFunction(t, "./internal/testenv/testdata/echo")
	t.Logf("BuildFunction: %v", time.Since(buildStart))

	var pids []procID
	t.Run("invoke", func(t *testing.T) {
		startedAt := time.Now()
		r := LambdaRIE(t, bootstrap, map[string]string{"ECHO_MARKER": "from-test"})
		_, installDur, _ := rieBinary()
		t.Logf("aws-lambda-rie install %v, start-to-listening %v", installDur, time.Since(startedAt))

		payload := []byte(`{"hello":"world","n":[1,2,3]}`)
		cold := time.Now()
		got, err := r.Invoke(ctx(t), payload)
		if err != nil {
			t.Fatalf("Invoke: %v\n%s", err, r.Logs())
		}
		coldDur := time.Since(cold)
		if !bytes.Equal(got, payload) {
			t.Fatalf("echo returned %s, want %s", got, payload)
		}
		const warmN = 20
		warm := time.Now()
		for i := range warmN {
			p := []byte(`{"i":` + strconv.Itoa(i) + `}`)
			got, err := r.Invoke(ctx(t), p)
			if err != nil || !bytes.Equal(got, p) {
				t.Fatalf("warm Invoke %d = %s, %v", i, got, err)
			}
		}
		t.Logf("invoke latency: cold (incl. function init) %v, warm mean %v", coldDur, time.Since(warm)/warmN)

		// Concurrent callers are serialized rather than crashing the emulator.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				p := []byte(`{"c":` + strconv.Itoa(i) + `}`)
				got, err := r.Invoke(ctx(t), p)
				if err == nil && !bytes.Equal(got, p) {
					err = errors.New("concurrent invoke got " + string(got))
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}

		got, err = r.Invoke(ctx(t), []byte(`{"env":"ECHO_MARKER"}`))
		if err != nil || string(got) != `{"ECHO_MARKER":"from-test"}` {
			t.Fatalf("env passthrough: %s, %v", got, err)
		}
		got, err = r.Invoke(ctx(t), []byte(`{"env":"GOFLAGS"}`))
		if err != nil || string(got) != `{"GOFLAGS":""}` {
			t.Fatalf("test environment leaked into the function: %s, %v", got, err)
		}

		got, err = r.Invoke(ctx(t), []byte(`{"fail":"boom"}`))
		if err != nil {
			t.Fatalf("function error should come back as a response, got %v", err)
		}
		if !bytes.Contains(got, []byte(`"errorMessage":"boom"`)) {
			t.Fatalf("function error response = %s", got)
		}
		t.Logf("function error response: %s", got)

		pids = append([]procID{{pid: r.cmd.Process.Pid}}, descendants(r.cmd.Process.Pid)...)
		if len(pids) < 2 {
			t.Fatalf("expected the emulator to have started the function; processes: %v", pids)
		}
	})
	// The subtest's cleanup stopped the emulator; nothing may survive it.
	for _, p := range pids {
		if running(p.pid) && (p.start == "" || p.same()) {
			t.Errorf("pid %d still running after LambdaRIE cleanup", p.pid)
		}
	}
}

// TestChildDiesWithParent SIGKILLs a parent process (a re-exec of this test
// binary) that started a child with childSysProcAttr, and checks the kernel
// killed the child too: the guarantee that a killed `go test` does not leak
// a DynamoDB Local JVM.
func TestChildDiesWithParent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe)
	parent.Env = append(os.Environ(), orphanHelperEnv+"=1")
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 32)
	n, err := stdout.Read(line)
	if err != nil {
		t.Fatalf("helper printed no child pid: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("helper output %q: %v", line[:n], err)
	}
	if !running(child) {
		t.Fatalf("child %d not running before the parent died", child)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for running(child) {
		if time.Now().After(deadline) {
			killGroup(child)
			t.Fatalf("child %d outlived its SIGKILLed parent", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// orphanHelper starts a long sleep as a child, prints its PID and waits to
// be killed.
func orphanHelper() {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		os.Exit(3)
	}
	os.Stdout.WriteString(strconv.Itoa(cmd.Process.Pid) + "\n")
	_ = cmd.Wait()
	os.Exit(0)
}

// running reports whether pid is a live process. A killed orphan can linger
// as a zombie when the container's init does not reap; that counts as dead.
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}
