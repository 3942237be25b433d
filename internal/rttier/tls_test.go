package rttier

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"github.com/skyfold/syncular-lambda/internal/wiring"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// testCertRef is the Secrets Manager ARN the tests configure; the
// secret store answering for it is secretStore.
const testCertRef = "arn:aws:secretsmanager:us-east-1:123456789012:secret:realtime-tls-AbCdEf"

// testCA is a self-signed certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a server certificate for localhost and 127.0.0.1 valid
// from notBefore to notAfter: the chain (leaf, then the CA) and the key,
// as PEM.
func (ca *testCA) issue(t *testing.T, serial int64, notBefore, notAfter time.Time) (chainPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return string(chain), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// certJSON is the documented secret value.
func certJSON(t *testing.T, chainPEM, keyPEM string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"certificate": chainPEM, "privateKey": keyPEM})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// secretStore answers the Secrets Manager GetSecretValue API (JSON 1.1
// protocol) for testCertRef, so the tier reads its certificate through
// the real SDK client. put replaces the value (put-secret-value).
type secretStore struct {
	srv   *httptest.Server
	mu    sync.Mutex
	value string
	reads atomic.Int64
}

func newSecretStore(t *testing.T, value string) *secretStore {
	t.Helper()
	s := &secretStore{value: value}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ SecretId string }
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" || json.Unmarshal(body, &in) != nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"InvalidRequestException","message":"unexpected request"}`))
			return
		}
		s.reads.Add(1)
		s.mu.Lock()
		v := s.value
		s.mu.Unlock()
		if in.SecretId != testCertRef || v == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`))
			return
		}
		out, _ := json.Marshal(map[string]any{"ARN": testCertRef, "Name": "realtime-tls", "VersionId": "v1", "SecretString": v, "CreatedDate": 1.7e9})
		_, _ = w.Write(out)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *secretStore) put(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value = v
}

// awsConfig is an SDK configuration whose Secrets Manager is the store.
func (s *secretStore) awsConfig() aws.Config {
	return aws.Config{
		Region:       testenv.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(s.srv.URL),
	}
}

// tlsSetup makes newStack's instances serve TLS with the store's secret.
type tlsSetup struct {
	store  *secretStore
	client *http.Client
}

// trusting is an HTTPS client that trusts the given CAs only.
func trusting(cas ...*testCA) *http.Client {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca.cert)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "localhost"},
		DisableKeepAlives: true,
	}}
}

// A stock client that trusts the deployment's CA opens wss:// on the
// tier, syncs over the socket (§8.7 rounds) and gets the delta of a
// commit made through the HTTP push function; the port speaks nothing
// but TLS 1.2+ with ALPN http/1.1.
func TestTierServesWSS(t *testing.T) {
	ca := newTestCA(t, "tier test CA")
	chain, key := ca.issue(t, 100, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	st := newStack(t)
	st.tls = &tlsSetup{store: newSecretStore(t, certJSON(t, chain, key)), client: trusting(ca)}
	in := st.start("inst-tls")
	if !strings.HasPrefix(in.url, "https://") {
		t.Fatalf("instance URL %s", in.url)
	}
	rd := st.reader3(t, in, "reader3", "r3")
	st.pushHTTP(t, "t1")
	st.pump(st.forward)
	if got := rd.nextDelta(); strings.Join(got, ",") != "t1" {
		t.Fatalf("delta over wss://: %v", got)
	}

	addr := strings.TrimPrefix(in.url, "https://")
	// The health check path answers over TLS too (the NLB's HTTPS check).
	resp, err := st.tls.client.Get(in.url + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 100 {
		t.Errorf("/healthz: status %d over %+v", resp.StatusCode, resp.TLS)
	}
	// A client that does not trust the CA is refused by its own check.
	if _, _, err := websocket.Dial(context.Background(), "wss://"+addr+"/realtime?clientId=x", &websocket.DialOptions{HTTPClient: trusting(newTestCA(t, "other CA"))}); err == nil {
		t.Error("a client trusting another CA completed the handshake")
	}
	// Plain ws:// on the TLS port gets no upgrade.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, _, err := websocket.Dial(ctx, "ws://"+addr+"/realtime?clientId=x&token="+st.token("x"), nil); err == nil {
		c.CloseNow()
		t.Error("plain ws:// upgraded on the TLS port")
	}
	// TLS 1.1 is refused; ALPN never picks h2.
	if c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: "localhost", MaxVersion: tls.VersionTLS11}); err == nil {
		c.Close()
		t.Error("TLS 1.1 handshake accepted")
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("ALPN %q, want http/1.1", p)
	}
	c.Close()
}

// servedSerial is the serial of the leaf certificate a new connection
// to addr gets.
func servedSerial(t *testing.T, addr string, pool *x509.CertPool) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// A renewed certificate put into the secret is served to new connections
// after the reload interval, without a restart, and open connections
// keep working; a bad value put later is logged and the good certificate
// stays.
func TestTierReloadsRenewedCertificate(t *testing.T) {
	oldCA, newCA := newTestCA(t, "old CA"), newTestCA(t, "new CA")
	chain, key := oldCA.issue(t, 1, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	store := newSecretStore(t, certJSON(t, chain, key))
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"SYNC_TABLE_NAME": "t", "SYNC_BUCKET": "b", "SYNC_AUTH_MODE": "hs256", "SYNC_HS256_SECRET": testSecret,
			"SYNC_REALTIME_ADDR": "127.0.0.1:0", "SYNC_TLS_CERT_REF": testCertRef, "SYNC_TLS_RELOAD_INTERVAL": "1s"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := ListenRealtime(ctx, ctx, cfg, store.awsConfig(), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	addr := ln.Addr().String()
	both := x509.NewCertPool()
	both.AddCert(oldCA.cert)
	both.AddCert(newCA.cert)

	if s := servedSerial(t, addr, both); s != 1 {
		t.Fatalf("serial %d served at start, want 1", s)
	}
	// An open connection made with the old certificate keeps working.
	open, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: both, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	// The renewal in the other accepted form: one PEM text with the chain
	// and the key (cat fullchain.pem privkey.pem).
	chain, key = newCA.issue(t, 2, time.Now().Add(-time.Minute), time.Now().Add(90*24*time.Hour))
	store.put(chain + key)
	renewed := time.Now()
	waitSerial(t, addr, both, 2)
	t.Logf("renewed certificate served %v after put-secret-value (reload interval 1s)", time.Since(renewed).Round(10*time.Millisecond))
	_ = open.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 12)
	if _, err := open.Write([]byte("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Errorf("open connection after the reload: %v", err)
	} else if _, err := io.ReadFull(open, buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Errorf("open connection after the reload answered %q, %v", buf, err)
	}
	if n := strings.Count(logs.String(), "TLS certificate loaded"); n != 2 {
		t.Errorf("%d 'certificate loaded' lines, want 2 (start, renewal)", n)
	}

	// A broken value in the secret: reads go on, the good one stays.
	store.put("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n" + strings.Repeat("x", 40))
	reads := store.reads.Load()
	for end := time.Now().Add(15 * time.Second); store.reads.Load() < reads+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the secret was not re-read")
		}
	}
	if s := servedSerial(t, addr, both); s != 2 {
		t.Errorf("serial %d served after a bad value, want 2 (kept)", s)
	}
	if !strings.Contains(logs.String(), "TLS certificate not reloaded") || strings.Contains(logs.String(), "not base64") {
		t.Errorf("the bad value is logged as an error naming the reference, never quoting the value:\n%s", logs.String())
	}
}

// waitSerial waits until new connections get the certificate with serial.
func waitSerial(t *testing.T, addr string, pool *x509.CertPool, serial int64) {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if servedSerial(t, addr, pool) == serial {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("certificate %d never served", serial)
		}
	}
}

// TestMainProcess is the tier's main in a child process (see
// TestTierStartFailsOnBadCertificate); it does nothing in a normal run.
func TestMainProcess(t *testing.T) {
	if os.Getenv("REALTIME_TEST_MAIN") != "1" {
		t.Skip("runs only as the child of TestTierStartFailsOnBadCertificate")
	}
	Main(wiring.Hooks{})
}

// A missing or bad certificate stops the tier's start with exit status 1
// and one JSON log line that names the reference and the problem (never
// the secret's value), before it serves anything.
func TestTierStartFailsOnBadCertificate(t *testing.T) {
	ca := newTestCA(t, "tier test CA")
	chain, key := ca.issue(t, 7, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	expChain, expKey := ca.issue(t, 8, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	_, otherKey := ca.issue(t, 9, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	leafOnly := chain[:strings.Index(chain, "-----END CERTIFICATE-----")+len("-----END CERTIFICATE-----\n")]
	for name, tc := range map[string]struct{ value, want string }{
		"not PEM":          {strings.Repeat("garbage ", 8), "not a PEM certificate chain with its private key"},
		"truncated PEM":    {certJSON(t, chain[:len(chain)/2], key), "not a PEM certificate chain with its private key"},
		"no private key":   {leafOnly, "not a PEM certificate chain with its private key"},
		"JSON without key": {`{"certificate": ` + mustJSON(t, chain) + `}`, `JSON without "certificate" or "privateKey"`},
		"broken JSON":      {`{"certificate": "` + strings.Repeat("a", 40), "not valid JSON"},
		"key of another":   {certJSON(t, chain, otherKey), "private key does not match public key"},
		"expired":          {certJSON(t, expChain, expKey), "not now"},
		"missing secret":   {"", "ResourceNotFoundException"},
	} {
		t.Run(name, func(t *testing.T) {
			store := newSecretStore(t, tc.value)
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMainProcess$")
			cmd.Env = append(os.Environ(),
				"REALTIME_TEST_MAIN=1", "SYNC_TABLE_NAME=t", "SYNC_BUCKET=b", "SYNC_AUTH_MODE=hs256", "SYNC_HS256_SECRET="+testSecret,
				"SYNC_SCHEMA_PATH=../../examples/todo/schema.json", "SYNC_REALTIME_ADDR=127.0.0.1:0", "SYNC_HINT_ADDR=127.0.0.1:0",
				"SYNC_HINT_ADVERTISE=http://127.0.0.1:1", "SYNC_DYNAMODB_ENDPOINT=http://127.0.0.1:1",
				"SYNC_TLS_CERT_REF="+testCertRef, "AWS_ENDPOINT_URL_SECRETS_MANAGER="+store.srv.URL,
				"AWS_REGION="+testenv.Region, "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
				"AWS_CONFIG_FILE="+dir+"/none", "AWS_SHARED_CREDENTIALS_FILE="+dir+"/none", "AWS_MAX_ATTEMPTS=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d log lines, want exactly one:\n%s", len(lines), stdout.String())
			}
			var line struct{ Level, Msg, Error string }
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatalf("log line %q: %v", lines[0], err)
			}
			t.Logf("%s", lines[0])
			if line.Level != "ERROR" || line.Msg != "realtime tier failed" || !strings.Contains(line.Error, testCertRef) || !strings.Contains(line.Error, tc.want) {
				t.Errorf("log line %+v, want an error naming %s and %q", line, testCertRef, tc.want)
			}
			if strings.Contains(lines[0], "PRIVATE KEY") || (tc.value != "" && len(tc.value) > 40 && strings.Contains(lines[0], tc.value[20:40])) {
				t.Errorf("the log line quotes the secret's value: %s", lines[0])
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
