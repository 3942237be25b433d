package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// The tool must never be pointed at anything but this machine.
func TestLoopbackOnly(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8787", "http://127.0.0.2:1/api", "http://[::1]:8787", "http://localhost:8787", "https://127.0.0.1"} {
		if err := loopbackOnly(u); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1:8787", "http://example.com", "http://0.0.0.0:8787", "http://127.0.0.1.example.com", "ftp://127.0.0.1", "127.0.0.1:8787", "http://[::]:1"} {
		if err := loopbackOnly(u); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
	err := run(context.Background(), []string{"-url", "http://192.0.2.1:8787", "-secret", strings.Repeat("k", 32)}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("run against a remote target: %v", err)
	}
}

func TestProcReaders(t *testing.T) {
	if _, ok := procCPU(os.Getpid()); !ok {
		t.Error("procCPU of this process failed")
	}
	if rss, hwm := procMem(os.Getpid()); rss <= 0 || hwm < rss {
		t.Errorf("procMem: rss %d hwm %d", rss, hwm)
	}
	if _, ok := procCPU(0); ok {
		t.Error("procCPU(0) reported a value")
	}
}
