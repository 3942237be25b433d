package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func minimal() map[string]string {
	return map[string]string{"SYNC_TABLE_NAME": "t", "SYNC_BUCKET": "b"}
}

func TestDefaults(t *testing.T) {
	c, err := Load(env(minimal()))
	if err != nil {
		t.Fatal(err)
	}
	if c.AuthMode != AuthJWTAuthorizer || c.ActorClaim != "sub" || c.DefaultPartition != "default" ||
		c.ScopesMode != ScopesClaim || c.ScopesClaim != "syncular_scopes" || c.SignedURLs != SignedPresign ||
		c.SignedURLTTL != 5*time.Minute || c.MaxOperations != 500 || c.ResponseBudgetBytes != 4<<20 ||
		c.SegmentTTL != 24*time.Hour || c.MaxBodyBytes != 32<<20 || c.LogLevel != slog.LevelInfo || c.Mount != "" ||
		c.AuthLeases || c.AuthLeaseTTL != 15*time.Minute || c.OutcomeTTL != 30*24*time.Hour {
		t.Fatalf("defaults: %+v", c)
	}
	if got := c.SchemaFile(); filepath.Base(got) != "schema.json" {
		t.Fatalf("default schema path %q", got)
	}
}

func TestFullConfig(t *testing.T) {
	m := minimal()
	for k, v := range map[string]string{
		"SYNC_MOUNT": "/api/", "SYNC_AUTH_MODE": "HS256", "SYNC_HS256_SECRET": strings.Repeat("k", 32),
		"SYNC_PARTITION_CLAIM": "custom:tenant", "SYNC_SCOPES_MODE": "table", "SYNC_SIGNED_URLS": "native",
		"SYNC_SIGNING_KEY_REF": "/syncular/signing-key", "SYNC_SIGNED_URL_TTL": "15m", "SYNC_LOG_LEVEL": "debug",
		"SYNC_DYNAMODB_ENDPOINT": "http://127.0.0.1:8000", "SYNC_S3_PATH_STYLE": "true", "SYNC_PUBLIC_URL": "https://sync.example.com/",
		"SYNC_SCHEMA_PATH": "/var/task/app.json", "SYNC_AUTH_LEASES": "on", "SYNC_AUTH_LEASE_TTL": "2h",
	} {
		m[k] = v
	}
	c, err := Load(env(m))
	if err != nil {
		t.Fatal(err)
	}
	if c.Mount != "/api" || c.AuthMode != AuthHS256 || c.PartitionClaim != "custom:tenant" || c.ScopesMode != ScopesTable ||
		c.SignedURLs != SignedNative || c.SigningKeyRef != "/syncular/signing-key" || c.SignedURLTTL != 15*time.Minute ||
		c.LogLevel != slog.LevelDebug || !c.S3PathStyle || c.PublicURL != "https://sync.example.com" || c.SchemaFile() != "/var/task/app.json" ||
		!c.AuthLeases || c.AuthLeaseTTL != 2*time.Hour {
		t.Fatalf("got %+v", c)
	}
}

// Bad configuration must fail with one error that names every offending
// variable, so the single init log line says what to fix.
func TestBadConfig(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{}, []string{"SYNC_TABLE_NAME is required", "SYNC_BUCKET is required"}},
		{map[string]string{"SYNC_AUTH_MODE": "cognito"}, []string{`SYNC_AUTH_MODE="cognito": must be one of jwt-authorizer, hs256`}},
		{map[string]string{"SYNC_AUTH_MODE": "hs256"}, []string{"SYNC_HS256_SECRET or SYNC_HS256_SECRET_REF is required"}},
		{map[string]string{"SYNC_AUTH_MODE": "hs256", "SYNC_HS256_SECRET": "short"}, []string{"SYNC_HS256_SECRET must be at least 32 bytes"}},
		{map[string]string{"SYNC_HS256_SECRET": strings.Repeat("k", 40)}, []string{"SYNC_AUTH_MODE is jwt-authorizer but an HS256 secret is set"}},
		{map[string]string{"SYNC_SIGNED_URLS": "native"}, []string{"SYNC_SIGNING_KEY or SYNC_SIGNING_KEY_REF is required"}},
		{map[string]string{"SYNC_SIGNED_URLS": "native", "SYNC_SIGNING_KEY": strings.Repeat("k", 32), "SYNC_SIGNING_KEY_REF": "x"}, []string{"SYNC_SIGNING_KEY and SYNC_SIGNING_KEY_REF are both set"}},
		{map[string]string{"SYNC_SIGNED_URL_TTL": "1h"}, []string{"SYNC_SIGNED_URL_TTL=1h0m0s: must be between 1s and 15m0s"}},
		{map[string]string{"SYNC_SIGNED_URL_TTL": "soon"}, []string{`SYNC_SIGNED_URL_TTL="soon": not a duration`}},
		{map[string]string{"SYNC_MAX_OPERATIONS": "lots"}, []string{`SYNC_MAX_OPERATIONS="lots": not an integer`}},
		{map[string]string{"SYNC_RESPONSE_BUDGET_BYTES": "6000000"}, []string{"SYNC_RESPONSE_BUDGET_BYTES=6000000: must be between"}},
		{map[string]string{"SYNC_MOUNT": "api"}, []string{`SYNC_MOUNT="api": must be a path like /api`}},
		{map[string]string{"SYNC_LOG_LEVEL": "loud"}, []string{`SYNC_LOG_LEVEL="loud"`}},
		{map[string]string{"SYNC_S3_PATH_STYLE": "yes please"}, []string{`SYNC_S3_PATH_STYLE="yes please": must be true or false`}},
		{map[string]string{"SYNC_DYNAMODB_ENDPOINT": "localhost:8000"}, []string{"SYNC_DYNAMODB_ENDPOINT"}},
		{map[string]string{"SYNC_PUBLIC_URL": "sync.example.com"}, []string{"SYNC_PUBLIC_URL"}},
		{map[string]string{"SYNC_SIGNED_URLS": "native", "SYNC_SIGNING_KEY": strings.Repeat("k", 32)}, []string{"SYNC_PUBLIC_URL is required with SYNC_SIGNED_URLS=native"}},
		{map[string]string{"SYNC_SCOPES_MODE": "ldap"}, []string{"SYNC_SCOPES_MODE"}},
		{map[string]string{"SYNC_OUTCOME_TTL": "1h"}, []string{"SYNC_OUTCOME_TTL=1h0m0s: must be between 24h0m0s and 87600h0m0s"}},
		{map[string]string{"SYNC_AUTH_LEASES": "true"}, []string{`SYNC_AUTH_LEASES="true": must be one of off, on`}},
		{map[string]string{"SYNC_AUTH_LEASE_TTL": "10s"}, []string{"SYNC_AUTH_LEASE_TTL=10s: must be between 1m0s and 720h0m0s"}},
		{map[string]string{"SYNC_SEGMENT_TTL": "48h"}, []string{"SYNC_SEGMENT_OBJECT_DAYS (2) must exceed SYNC_SEGMENT_TTL (48h0m0s) + 15m + 1h"}},
	}
	for _, tc := range cases {
		m := tc.env
		if _, ok := m["SYNC_TABLE_NAME"]; !ok && len(m) > 0 {
			m["SYNC_TABLE_NAME"], m["SYNC_BUCKET"] = "t", "b"
		}
		_, err := Load(env(m))
		if err == nil {
			t.Fatalf("%v: no error", tc.env)
		}
		if !IsConfigError(err) {
			t.Fatalf("%v: not a config error: %v", tc.env, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v:\n got %v\nwant it to mention %q", tc.env, err, w)
			}
		}
	}
}

// A secret value never appears in an error message.
func TestErrorsDoNotEchoSecrets(t *testing.T) {
	m := minimal()
	m["SYNC_AUTH_MODE"] = "hs256"
	m["SYNC_HS256_SECRET"] = "s3cr3t-value"
	_, err := Load(env(m))
	if err == nil || strings.Contains(err.Error(), "s3cr3t-value") {
		t.Fatalf("got %v", err)
	}
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var envRef = regexp.MustCompile(`"(SYNC_[A-Z0-9_]+)"`)

// Vars documents exactly the variables Load reads.
func TestVarsTableIsComplete(t *testing.T) {
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, m := range envRef.FindAllStringSubmatch(string(src), -1) {
		read[m[1]] = true
	}
	documented := map[string]bool{}
	for _, v := range Vars {
		if documented[v.Name] {
			t.Errorf("%s documented twice", v.Name)
		}
		documented[v.Name] = true
		if !read[v.Name] {
			t.Errorf("%s documented but never read", v.Name)
		}
	}
	for name := range read {
		if !documented[name] {
			t.Errorf("%s read but not in Vars", name)
		}
	}
}

// docs/CONFIG.md is generated from Vars: UPDATE_CONFIG_DOC=1 go test ./internal/config
func TestConfigDoc(t *testing.T) {
	path := filepath.Join(repoRoot(t), "docs", "CONFIG.md")
	want := Markdown()
	if os.Getenv("UPDATE_CONFIG_DOC") == "1" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with UPDATE_CONFIG_DOC=1 go test ./internal/config)", err)
	}
	if string(got) != want {
		t.Fatalf("docs/CONFIG.md is stale: regenerate with UPDATE_CONFIG_DOC=1 go test ./internal/config")
	}
}

func TestMarkdownListsEveryVar(t *testing.T) {
	md := Markdown()
	for _, v := range append(slices.Clone(Vars), RealtimeVars...) {
		if !strings.Contains(md, "| `"+v.Name+"` |") {
			t.Errorf("%s missing from the table", v.Name)
		}
	}
}
