package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/childproc"
)

// `make stack` prints the base URL, the realtime URL and `dev token
// <jwt>` (the line `make run` prints), serves until stopped, and leaves no
// child process behind.
func TestBanner(t *testing.T) {
	if os.Getenv("SKIP_DYNAMODB_LOCAL") == "1" && (os.Getenv("CI") == "" || os.Getenv("CI") == "0" || os.Getenv("CI") == "false") {
		t.Skip("SKIP_DYNAMODB_LOCAL=1: the stack needs DynamoDB Local")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-port", "0", "-quiet"}, pw, io.Discard); pw.Close() }()
	lines := map[string]string{}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && (f[0]+" "+f[1] == "base URL" || f[0]+" "+f[1] == "realtime URL" || f[0]+" "+f[1] == "dev token") {
			lines[f[0]+" "+f[1]] = f[2]
		}
		if strings.HasPrefix(sc.Text(), "Ctrl-C stops everything") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	base, rt, tok := lines["base URL"], lines["realtime URL"], lines["dev token"]
	if !strings.HasPrefix(base, "http://127.0.0.1:") || rt != "ws"+strings.TrimPrefix(base, "http")+"/realtime" || strings.Count(tok, ".") != 2 {
		t.Fatalf("banner: %v", lines)
	}
	// The printed token is accepted by the push function behind the
	// gateway (a bad body then fails to decode); no token is a 401.
	for _, c := range []struct {
		token  string
		status int
	}{{tok, http.StatusBadRequest}, {"", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodPost, base+"/sync", strings.NewReader("not ssp2"))
		req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("POST /sync (token %v): HTTP %d, want %d", c.token != "", resp.StatusCode, c.status)
		}
	}
	if len(childproc.Descendants(os.Getpid())) == 0 {
		t.Fatal("no child processes while the stack runs")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stack did not stop")
	}
	for _, p := range childproc.Descendants(os.Getpid()) {
		if p.Same() && syscall.Kill(p.PID, 0) == nil {
			t.Errorf("process %d outlived the stack", p.PID)
		}
	}
}
