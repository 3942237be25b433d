package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/dynamolocal"
)

// Region is the region every client built here uses. DynamoDB Local runs
// with -sharedDb, so the region and credentials do not partition its data.
const Region = "us-east-1"

const (
	dynamoInstallTimeout = 10 * time.Minute
	dynamoReadyTimeout   = 90 * time.Second // JVM start on 2 busy cores
	dynamoStartAttempts  = 3                // a free port can be taken before Java binds it
)

// DynamoLocal is the DynamoDB Local server shared by all tests of one test
// process. Tests isolate themselves by table name (see UniqueName).
type DynamoLocal struct {
	// Endpoint is the base URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	// StartupTime is how long the JVM took from exec to answering
	// ListTables; InstallTime is how long the install script ran.
	StartupTime, InstallTime time.Duration

	cmd  *exec.Cmd
	done chan struct{}
	out  *tailBuffer
}

var dynamo struct {
	once sync.Once
	mu   sync.Mutex // guards inst against stopDynamo
	inst *DynamoLocal
	err  error
}

// DynamoDB returns the process-wide DynamoDB Local, installing (via
// scripts/testenv-dynamodb.sh) and starting it on first use. It fails the
// test if that is impossible: in CI always, and locally unless
// SKIP_DYNAMODB_LOCAL=1, which skips instead (a skip in CI would hide that
// the adapter was never tested). The package's TestMain must call Main.
func DynamoDB(t testing.TB) *DynamoLocal {
	t.Helper()
	if os.Getenv("SKIP_DYNAMODB_LOCAL") == "1" {
		if !inCI() {
			t.Skip("SKIP_DYNAMODB_LOCAL=1: skipping a test that needs DynamoDB Local")
		}
		t.Log("SKIP_DYNAMODB_LOCAL=1 ignored because CI is set: DynamoDB tests must run in CI")
	}
	if !mainCalled.Load() {
		t.Fatal("testenv.DynamoDB: the package's TestMain must call testenv.Main(m), which stops the shared DynamoDB Local")
	}
	dynamo.once.Do(func() {
		inst, err := startDynamo()
		dynamo.mu.Lock()
		dynamo.inst, dynamo.err = inst, err
		dynamo.mu.Unlock()
	})
	dynamo.mu.Lock()
	inst, err := dynamo.inst, dynamo.err
	dynamo.mu.Unlock()
	if err != nil {
		t.Fatalf("testenv: DynamoDB Local is unavailable, so this test cannot run (set SKIP_DYNAMODB_LOCAL=1 to skip locally; never in CI):\n%v", err)
	}
	if inst == nil {
		t.Fatal("testenv: DynamoDB Local was already stopped (used after Main's tests finished?)")
	}
	return inst
}

// Client returns an SDK client for this server. It is built from explicit
// options rather than config.LoadDefaultConfig so the developer's AWS
// profile and environment can never point a test at a real account.
func (d *DynamoLocal) Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	hc := newHTTPClient(t)
	return dynamodb.New(dynamodb.Options{
		Region:       Region,
		BaseEndpoint: aws.String(d.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("testenv", "testenv", ""),
		HTTPClient:   hc,
		// DynamoDB Local omits X-Amz-Crc32 on error responses, which the
		// SDK would otherwise report as a checksum failure.
		DisableValidateResponseChecksum: true,
	})
}

// SlowClient is Client with every request held for latency before it
// is sent (a request whose context ends first is not sent): a stand-in
// for a real table's network round trip, so that a measurement on
// DynamoDB Local is bound by round trips rather than by the local
// server's CPU. Load measurements only; no test asserts on its timing.
func (d *DynamoLocal) SlowClient(t testing.TB, latency time.Duration) *dynamodb.Client {
	t.Helper()
	c := d.Client(t)
	if latency <= 0 {
		return c
	}
	return dynamodb.New(c.Options(), func(o *dynamodb.Options) {
		hc := newHTTPClient(t)
		hc.Transport = delayed{hc.Transport, latency}
		o.HTTPClient = hc
	})
}

// delayed is a transport that waits d before sending each request.
type delayed struct {
	base http.RoundTripper
	d    time.Duration
}

func (x delayed) RoundTrip(r *http.Request) (*http.Response, error) {
	tm := time.NewTimer(x.d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return x.base.RoundTrip(r)
}

// newHTTPClient returns a client whose pool is large enough for tests that
// hammer one local server from many goroutines (the default transport keeps
// only two idle connections per host, so most requests would dial anew).
func newHTTPClient(t testing.TB) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil, // local servers only; ignore HTTP_PROXY
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

func startDynamo() (*DynamoLocal, error) {
	installStart := time.Now()
	dir, err := runInstallScript("testenv-dynamodb.sh", dynamoInstallTimeout)
	if err != nil {
		return nil, err
	}
	installTime := time.Since(installStart)
	jar := filepath.Join(dir, "DynamoDBLocal.jar")
	if _, err := os.Stat(jar); err != nil {
		return nil, fmt.Errorf("testenv: install script reported %s but: %w", dir, err)
	}
	var errs []error
	for range dynamoStartAttempts {
		d, err := launchDynamo(dir)
		if err == nil {
			d.InstallTime = installTime
			return d, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func launchDynamo(dir string) (*DynamoLocal, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cmd, err := dynamolocal.Command(dir, port)
	if err != nil {
		return nil, err
	}
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childSysProcAttr()
	start := time.Now()
	if err := startChild(cmd); err != nil {
		return nil, fmt.Errorf("testenv: starting DynamoDB Local: %w", err)
	}
	d := &DynamoLocal{
		Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		cmd:      cmd,
		done:     make(chan struct{}),
		out:      out,
	}
	go func() { _ = cmd.Wait(); close(d.done) }()
	if err := d.waitReady(dynamoReadyTimeout); err != nil {
		d.stop()
		return nil, fmt.Errorf("%w\nDynamoDB Local output:\n%s", err, out.String())
	}
	d.StartupTime = time.Since(start)
	return d, nil
}

// waitReady polls until a ListTables call succeeds: an open port alone does
// not mean the server answers requests yet.
func (d *DynamoLocal) waitReady(timeout time.Duration) error {
	client := dynamodb.New(dynamodb.Options{
		Region:                          Region,
		BaseEndpoint:                    aws.String(d.Endpoint),
		Credentials:                     credentials.NewStaticCredentialsProvider("testenv", "testenv", ""),
		DisableValidateResponseChecksum: true,
		RetryMaxAttempts:                1,
		HTTPClient:                      &http.Client{Timeout: 5 * time.Second},
	})
	deadline := time.Now().Add(timeout)
	addr := d.Endpoint[len("http://"):]
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return fmt.Errorf("testenv: DynamoDB Local exited during startup (%v)", d.cmd.ProcessState)
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = client.ListTables(ctx, &dynamodb.ListTablesInput{})
			cancel()
			if err == nil {
				return nil
			}
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("testenv: DynamoDB Local not ready at %s after %v: %v", d.Endpoint, timeout, lastErr)
}

// stop kills the JVM's process group; it holds nothing worth a graceful
// shutdown (-inMemory).
func (d *DynamoLocal) stop() {
	if d == nil || d.cmd.Process == nil {
		return
	}
	stopProcess(d.cmd.Process, d.done, 0)
}

func stopDynamo() {
	dynamo.mu.Lock()
	inst := dynamo.inst
	dynamo.inst = nil
	dynamo.mu.Unlock()
	inst.stop()
}

// SeedPartitions creates n partitions named p000000, p000001, … with
// touch (a store's TouchPartition), 16 at a time, for tests that measure
// work over many partitions; it returns their names.
func SeedPartitions(t testing.TB, n int, touch func(ctx context.Context, partition string) error) []string {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%06d", i)
	}
	var (
		wg    sync.WaitGroup
		first error
		once  sync.Once
	)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if err := touch(context.Background(), names[i]); err != nil {
					once.Do(func() { first = fmt.Errorf("touch %s: %w", names[i], err) })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
	return names
}
