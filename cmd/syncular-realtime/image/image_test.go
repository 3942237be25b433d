package image

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The tarball of the host architecture: entrypoint, non-root user,
// platform, and the files with their modes, read back from the written
// tarball as a registry or `docker load` would see it.
func TestImageTarball(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "syncular-realtime")
	// A real static binary of the host architecture (a small main keeps
	// the test quick; the make target builds cmd/syncular-realtime).
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	schema := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schema, []byte(`{"tables":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := DefaultCABundle
	if _, err := os.Stat(ca); err != nil {
		ca = filepath.Join(dir, "ca.crt")
		if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := Build(Spec{Binary: bin, Schema: schema, CABundle: ca, Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := Write(out, "syncular-realtime:test", img); err != nil {
		t.Fatal(err)
	}
	back, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{BinaryPath}) {
		t.Errorf("entrypoint %v", cf.Config.Entrypoint)
	}
	if cf.Config.User != User || cf.Config.User[0] == '0' {
		t.Errorf("user %q, want non-root %s", cf.Config.User, User)
	}
	if !slices.Contains(cf.Config.Env, "SYNC_SCHEMA_PATH="+SchemaPath) {
		t.Errorf("env %v", cf.Config.Env)
	}
	want := map[string]struct {
		mode int64
		src  string
	}{
		BinaryPath: {0o555, bin}, SchemaPath: {0o444, schema}, CAPath: {0o444, ca}, PasswdPath: {0o444, ""},
	}
	tr := tar.NewReader(mutate.Extract(back))
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want["/"+h.Name]
		if !ok {
			continue
		}
		seen["/"+h.Name] = true
		body, _ := io.ReadAll(tr)
		if h.Mode != w.mode {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, w.mode)
		}
		if w.src != "" {
			if exp, _ := os.ReadFile(w.src); !bytes.Equal(body, exp) {
				t.Errorf("%s: content differs from %s", h.Name, w.src)
			}
		} else if !bytes.Contains(body, []byte("nonroot:x:65532:65532:")) {
			t.Errorf("%s lacks the non-root user", h.Name)
		}
	}
	for p := range want {
		if !seen[p] {
			t.Errorf("%s missing from the image", p)
		}
	}
	if fi, err := os.Stat(out); err == nil {
		t.Logf("image tarball: %d bytes", fi.Size())
	}

	// Push to a registry that requires credentials (an in-memory one on
	// loopback; ECR's are AWS and `aws ecr get-login-password`) with
	// REGISTRY_USERNAME/REGISTRY_PASSWORD, and read the image back.
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "AWS" || p != "token-from-ecr" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/syncular-realtime:test"
	env := map[string]string{"REGISTRY_USERNAME": "AWS", "REGISTRY_PASSWORD": "token-from-ecr"}
	if err := Push(out, ref, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	pulled, err := crane.Pull(ref, crane.WithAuth(&authn.Basic{Username: "AWS", Password: "token-from-ecr"}))
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := back.Digest()
	if got, _ := pulled.Digest(); got != wantDigest {
		t.Errorf("pushed digest %v, want %v", got, wantDigest)
	}
}

// A validators document goes into the image with SYNC_VALIDATORS_PATH
// pointing at it; without one the variable is not set.
func TestImageCarriesValidators(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const rules = `{"validators":[]}`
	spec := Spec{Binary: file("bin", "x"), Schema: file("schema.json", "{}"), CABundle: file("ca.crt", "ca"), Arch: runtime.GOARCH}
	for _, with := range []bool{false, true} {
		s := spec
		if with {
			s.Validators = file("validators.json", rules)
		}
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(cf.Config.Env, "SYNC_VALIDATORS_PATH="+ValidatorsPath); got != with {
			t.Fatalf("validators %v: env %v", with, cf.Config.Env)
		}
		var body []byte
		tr := tar.NewReader(mutate.Extract(img))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if "/"+h.Name == ValidatorsPath {
				if body, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		if with && string(body) != rules || !with && body != nil {
			t.Fatalf("validators %v: %s holds %q", with, ValidatorsPath, body)
		}
	}
}
