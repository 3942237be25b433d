// Package stack runs the deployed shape of the backend on one machine, on
// loopback only (`make stack`, cmd/syncular-stack, and the end-to-end
// tests of this package):
//
//   - DynamoDB Local (-sharedDb -inMemory) with the table created as
//     template.yaml declares it, its stream enabled with the template's
//     view type;
//   - an in-process S3 API (gofakes3) with the bucket;
//   - every HTTP function binary (app.Functions) built for the host and run
//     under the AWS Lambda Runtime Interface Emulator with the template's
//     environment (hs256 with a dev secret standing in for the JWT
//     authorizer, endpoints pointing at the local servers);
//   - a local API Gateway (HTTP API, payload 2.0) in front of them that
//     enforces the platform's limits and counts invocations;
//   - the stream consumer: the template's event source mapping (filters,
//     batch size, retries, bisect, record age) feeding the fanout function
//     under the emulator;
//   - two realtime tier instances (cmd/syncular-realtime) and one
//     <base>/realtime address that spreads WebSocket connections over them.
//
// Every child process runs in its own process group with Pdeathsig, and
// Close stops them all.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/dynamolocal"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

const (
	region = "us-east-1"
	// DevSecret is the HS256 secret of the stack's functions and tier
	// (env.local.json's, which is for local use only).
	DevSecret = "local-dev-only-hs256-secret-never-deploy-0001"
	// tierPackage is the realtime tier's main package.
	tierPackage = "./cmd/syncular-realtime"
)

// Config configures Start. The zero value is usable.
type Config struct {
	// Repo is the module root; empty finds it above the working directory.
	Repo string
	// Schema is the schema file (default examples/todo/schema.json).
	Schema string
	// Port is the gateway's port on 127.0.0.1 (0: a free one).
	Port int
	// Instances is the number of realtime tier instances (default 2).
	Instances int
	// Logs receives every child's output, each line prefixed with its
	// name (nil: kept only to explain a failed start).
	Logs io.Writer
	// Logger is the stack's own log (default: discard).
	Logger *slog.Logger
	// TierEnv adds to (or overrides) every tier instance's environment.
	TierEnv map[string]string
}

// Stack is a running local deployment.
type Stack struct {
	// BaseURL is the gateway (POST /sync, /push, /pull, GET /segments/{id},
	// the blob routes); RealtimeURL is BaseURL's /realtime as a ws:// URL.
	BaseURL, RealtimeURL string
	// DynamoEndpoint, S3Endpoint, Table, Bucket and StreamARN are the
	// storage the functions and the tier share.
	DynamoEndpoint, S3Endpoint, Table, Bucket, StreamARN string
	// Schema is the schema the stack serves.
	Schema *schema.Schema
	// HasTier reports whether the realtime tier runs (its package exists).
	HasTier bool

	cfg       Config
	repo      string
	tmp       string
	cancel    context.CancelFunc
	bg        sync.WaitGroup
	dynamo    *child
	servers   []*http.Server
	fns       map[string]*function
	fanout    *function
	consumer  *consumer
	tiers     []*tier
	proxy     *realtimeProxy
	log       *slog.Logger
	closeOnce sync.Once
}

// Start brings the whole stack up, or stops what it started and fails.
func Start(ctx context.Context, cfg Config) (s *Stack, err error) {
	if cfg.Instances == 0 {
		cfg.Instances = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	s = &Stack{cfg: cfg, log: cfg.Logger, fns: map[string]*function{}}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	schemaPath, tpl, err := s.prepare(cfg)
	if err != nil {
		return s, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	bin := filepath.Join(s.tmp, "bin")
	rie, err := s.buildAndStartDynamo(ctx, bin)
	if err != nil {
		return s, err
	}
	// Storage, created as the template declares it.
	s.Table, s.Bucket = "syncular-stack", "syncular-stack"
	if err := s.createStorage(ctx, tpl.StreamViewType()); err != nil {
		return s, err
	}
	// The gateway's listener first: its URL is the functions' public URL.
	ln, err := listenLoopback(cfg.Port)
	if err != nil {
		return s, err
	}
	s.BaseURL = "http://" + ln.Addr().String()
	s.RealtimeURL = "ws://" + ln.Addr().String() + "/realtime"
	envOf := func(logicalID string) map[string]string {
		env := tpl.FunctionEnv(logicalID)
		for k, v := range s.localEnv(schemaPath) {
			env[k] = v
		}
		return env
	}
	for _, f := range app.Functions {
		fn, err := startFunction(rie, filepath.Join(bin, filepath.Base(f.Dir)), f.Name, envOf(f.LogicalID),
			time.Duration(tpl.FunctionTimeout(f.LogicalID))*time.Second, cfg.Logs)
		if err != nil {
			return s, err
		}
		s.fns[f.Name] = fn
	}
	if s.HasTier {
		if err := s.startTiers(ctx, tpl, bin, schemaPath); err != nil {
			return s, err
		}
	}
	if err := s.startConsumer(runCtx, tpl, rie, bin, envOf); err != nil {
		return s, err
	}
	gw := &gateway{fns: s.fns, counts: s.Invocations, cors: tpl.HTTPAPICors(), timeout: IntegrationTimeout, log: s.log.With("component", "gateway")}
	if s.proxy != nil {
		gw.realtime = s.proxy
	}
	s.serve(ln, gw)
	return s, nil
}

// prepare finds the repository, the schema and the template, and makes
// the stack's temporary directory.
func (s *Stack) prepare(cfg Config) (schemaPath string, tpl *template, err error) {
	if s.repo = cfg.Repo; s.repo == "" {
		if s.repo, err = findRepo(); err != nil {
			return "", nil, err
		}
	}
	schemaPath = cfg.Schema
	if schemaPath == "" {
		schemaPath = filepath.Join(s.repo, "examples", "todo", "schema.json")
	}
	if schemaPath, err = filepath.Abs(schemaPath); err != nil {
		return "", nil, err
	}
	if s.Schema, err = schema.ReadFile(schemaPath); err != nil {
		return "", nil, fmt.Errorf("stack: schema: %w", err)
	}
	if tpl, err = loadTemplate(s.repo); err != nil {
		return "", nil, err
	}
	if s.tmp, err = os.MkdirTemp("", "syncular-stack-"); err != nil {
		return "", nil, err
	}
	return schemaPath, tpl, nil
}

// buildAndStartDynamo builds every binary into bin and installs the
// Lambda emulator (returning its path) while DynamoDB Local's JVM starts.
func (s *Stack) buildAndStartDynamo(ctx context.Context, bin string) (rie string, err error) {
	_, statErr := os.Stat(filepath.Join(s.repo, tierPackage))
	s.HasTier = statErr == nil
	pkgs := []string{}
	for _, f := range app.Functions {
		pkgs = append(pkgs, "./"+f.Dir)
	}
	pkgs = append(pkgs, "./functions/fanout")
	if s.HasTier {
		pkgs = append(pkgs, tierPackage)
	}
	var buildErr, rieErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); buildErr = buildBinaries(ctx, s.repo, bin, pkgs) }()
	go func() { defer wg.Done(); rie, rieErr = runScript(ctx, s.repo, "testenv-rie.sh") }()
	err = s.startDynamo(ctx)
	wg.Wait()
	if err != nil {
		return "", err
	}
	return rie, errors.Join(buildErr, rieErr)
}

// startTiers starts the realtime tier instances with the task
// definition's environment, and the one address in front of them.
func (s *Stack) startTiers(ctx context.Context, tpl *template, bin, schemaPath string) error {
	for i := range s.cfg.Instances {
		env := tpl.TaskEnv()
		if env == nil {
			env = tpl.FunctionEnv("")
		}
		for k, v := range s.localEnv(schemaPath) {
			env[k] = v
		}
		t, err := startTier(ctx, filepath.Join(bin, "syncular-realtime"), i, env, s.cfg.TierEnv, s.cfg.Logs)
		if err != nil {
			return err
		}
		s.tiers = append(s.tiers, t)
	}
	s.proxy = newRealtimeProxy(s.tiers, s.log)
	return nil
}

// startConsumer starts the fanout function and the stream consumer that
// invokes it, as the template's event source mapping declares.
func (s *Stack) startConsumer(runCtx context.Context, tpl *template, rie, bin string, envOf func(string) map[string]string) error {
	m, err := tpl.StreamMapping()
	if err != nil {
		return err
	}
	fanoutID := tpl.FunctionOf(m.ID)
	if s.fanout, err = startFunction(rie, filepath.Join(bin, "fanout"), "fanout", envOf(fanoutID),
		time.Duration(tpl.FunctionTimeout(fanoutID))*time.Second, s.cfg.Logs); err != nil {
		return err
	}
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region: region, BaseEndpoint: aws.String(s.DynamoEndpoint),
		Credentials: credentials.NewStaticCredentialsProvider("stack", "stack", ""),
	})
	fanoutTimeout := s.fanout.timeout
	s.consumer = &consumer{streams: streams, arn: s.StreamARN, region: region, m: m, log: s.log.With("component", "stream"),
		invoke: func(ctx context.Context, payload []byte) ([]byte, bool, error) {
			ctx, cancel := context.WithTimeout(ctx, fanoutTimeout)
			defer cancel()
			return s.fanout.invoke(ctx, payload)
		}}
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.consumer.run(runCtx) }()
	return nil
}

// localEnv is what differs from AWS: local endpoints, the dev secret in
// place of the JWT authorizer, the stack's table, bucket and schema.
func (s *Stack) localEnv(schemaPath string) map[string]string {
	return map[string]string{
		"SYNC_TABLE_NAME": s.Table, "SYNC_BUCKET": s.Bucket,
		"SYNC_DYNAMODB_ENDPOINT": s.DynamoEndpoint, "SYNC_S3_ENDPOINT": s.S3Endpoint, "SYNC_S3_PATH_STYLE": "true",
		"SYNC_AUTH_MODE": "hs256", "SYNC_HS256_SECRET": DevSecret,
		"SYNC_SCHEMA_PATH": schemaPath, "SYNC_PUBLIC_URL": s.BaseURL, "SYNC_LOG_LEVEL": "info",
	}
}

func (s *Stack) serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.servers = append(s.servers, srv)
	go func() { _ = srv.Serve(ln) }()
}

func (s *Stack) startDynamo(ctx context.Context) error {
	dir, err := dynamolocal.Install(ctx, s.repo)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd, err := dynamolocal.Command(dir, port)
	if err != nil {
		return err
	}
	cmd.Dir = s.tmp
	if s.dynamo, err = startChild("dynamodb", cmd, nil); err != nil {
		return err
	}
	s.DynamoEndpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	db := s.dynamoClient()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if s.dynamo.exited() {
			return fmt.Errorf("stack: DynamoDB Local exited:\n%s", s.dynamo.out.String())
		}
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := db.ListTables(c, &dynamodb.ListTablesInput{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stack: DynamoDB Local not ready: %w\n%s", err, s.dynamo.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Stack) dynamoClient() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: region, BaseEndpoint: aws.String(s.DynamoEndpoint),
		Credentials:                     credentials.NewStaticCredentialsProvider("stack", "stack", ""),
		DisableValidateResponseChecksum: true, RetryMaxAttempts: 1,
		HTTPClient: &http.Client{Timeout: 30 * time.Second},
	})
}

// createStorage starts the S3 server and creates the table (the
// definition template.yaml is tested against, plus its stream) and the
// bucket.
func (s *Stack) createStorage(ctx context.Context, view string) error {
	ln, err := listenLoopback(0)
	if err != nil {
		return err
	}
	s.S3Endpoint = "http://" + ln.Addr().String()
	s.serve(ln, gofakes3.New(s3mem.New()).Server())
	s3c := s3.New(s3.Options{Region: region, BaseEndpoint: aws.String(s.S3Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("stack", "stack", "")})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		return fmt.Errorf("stack: create bucket: %w", err)
	}
	db := s.dynamoClient()
	if err := dynamostore.CreateTable(ctx, db, s.Table); err != nil {
		return err
	}
	if view == "" {
		return errors.New("stack: template.yaml's SyncTable declares no stream")
	}
	out, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(s.Table),
		StreamSpecification: &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewType(view)}})
	if err != nil {
		return fmt.Errorf("stack: enable the table's stream: %w", err)
	}
	s.StreamARN = aws.ToString(out.TableDescription.LatestStreamArn)
	// The stack's table is new, so no older build serves it: raise the
	// store-format level as a new stack's MigrateOnCreate does.
	if _, err := dynamostore.New(db, s.Table, dynamostore.Options{}).RaiseFormatLevel(ctx); err != nil {
		return fmt.Errorf("stack: raise the store-format level: %w", err)
	}
	return nil
}

// Token mints an HS256 token the functions and the tier accept.
func (s *Stack) Token(actor string, scopes map[string][]string, ttl time.Duration) (string, error) {
	return auth.MintHS256([]byte(DevSecret), auth.Claims{"sub": actor, "syncular_scopes": scopes}, ttl, time.Now())
}

// DevToken is the printed 24 h token: every scope variable of the schema
// allowed "*", as `make run` prints it.
func (s *Stack) DevToken(actor string) (string, error) {
	scopes := map[string][]string{}
	for _, v := range s.Schema.Versions[s.Schema.Latest].Variables() {
		scopes[v] = []string{"*"}
	}
	return s.Token(actor, scopes, 24*time.Hour)
}

// Invocations counts the invokes each function got (gateway and stream).
func (s *Stack) Invocations() map[string]int64 {
	m := map[string]int64{}
	for name, f := range s.fns {
		m[name] = f.count.Load()
	}
	if s.fanout != nil {
		m["fanout"] = s.fanout.count.Load()
	}
	return m
}

// StreamStats reports the stream consumer's counters.
func (s *Stack) StreamStats() StreamStats { return s.consumer.Stats() }

// Close stops everything Start started.
func (s *Stack) Close() {
	s.closeOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		for _, srv := range s.servers {
			_ = srv.Close()
		}
		var wg sync.WaitGroup
		for _, t := range s.tiers {
			wg.Add(1)
			go func() { defer wg.Done(); t.proc.stop(3 * time.Second) }()
		}
		for _, f := range s.fns {
			wg.Add(1)
			go func() { defer wg.Done(); f.proc.stop(2 * time.Second) }()
		}
		if s.fanout != nil {
			wg.Add(1)
			go func() { defer wg.Done(); s.fanout.proc.stop(2 * time.Second) }()
		}
		wg.Wait()
		s.bg.Wait()
		s.dynamo.stop(0)
		if s.tmp != "" {
			_ = os.RemoveAll(s.tmp)
		}
	})
}

// findRepo walks up from the working directory to this module's go.mod.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/skyfold/syncular-lambda\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("stack: the module's go.mod is not above the working directory")
		}
		dir = parent
	}
}
