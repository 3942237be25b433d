package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// NewJSONHandler writes the same JSON document as slog.NewJSONHandler for
// a request line but for the "time" and "level" members (the directive's Timestamp
// carries the time), and leaves other lines alone.
func TestJSONHandlerMatchesStandard(t *testing.T) {
	e := &EMF{Namespace: "NS", Fixed: map[string]string{DimFunction: "pull"}, Now: func() time.Time { return time.UnixMilli(1_800_000_000_000) }}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	records := map[string]slog.Record{}
	line := slog.NewRecord(at, slog.LevelInfo, "request", 0)
	line.AddAttrs(e.RequestLine(requestAttrs())...)
	records["request line"] = line
	other := slog.NewRecord(at, slog.LevelError, "init failed", 0)
	other.AddAttrs(slog.String("error", `quote " and <html>`), slog.Int("n", 3))
	records["other line"] = other
	empty := slog.NewRecord(at, slog.LevelInfo, "", 0)
	empty.AddAttrs(e.Annotate([]slog.Attr{slog.Int("applied", 1)})...)
	records["only a directive"] = empty

	for name, r := range records {
		var want, got bytes.Buffer
		std := slog.Handler(slog.NewJSONHandler(&want, nil)).WithAttrs([]slog.Attr{slog.String("function", "pull")})
		ours := NewJSONHandler(&got, nil).WithAttrs([]slog.Attr{slog.String("function", "pull")})
		if err := std.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if err := ours.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(want.Bytes(), &a); err != nil {
			t.Fatalf("%s: standard line: %v", name, err)
		}
		if err := json.Unmarshal(got.Bytes(), &b); err != nil {
			t.Fatalf("%s: our line is not JSON: %v\n%s", name, err, got.Bytes())
		}
		if _, ok := a["_aws"]; ok {
			for _, k := range []string{"time", "level"} {
				if _, ok := b[k]; ok {
					t.Errorf("%s: a line with a directive kept its %s member", name, k)
				}
				delete(a, k)
			}
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) || !bytes.HasSuffix(got.Bytes(), []byte("}\n")) || bytes.Count(got.Bytes(), []byte("\n")) != 1 {
			t.Errorf("%s:\nstandard %s\nours     %s", name, want.Bytes(), got.Bytes())
		}
		if name == "request line" {
			if _, err := Parse(bytes.TrimSpace(got.Bytes())); err != nil {
				t.Errorf("not a valid EMF document: %v", err)
			}
		}
	}
}

// Under a group the directive is not at the top level: the standard path.
func TestJSONHandlerGroup(t *testing.T) {
	var got bytes.Buffer
	e := &EMF{Namespace: "NS", Fixed: map[string]string{DimFunction: "pull"}}
	slog.New(NewJSONHandler(&got, nil)).WithGroup("g").LogAttrs(context.Background(), slog.LevelInfo, "x", e.Annotate([]slog.Attr{slog.Int("applied", 1)})...)
	var m map[string]any
	if err := json.Unmarshal(got.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	g, _ := m["g"].(map[string]any)
	if _, ok := g["_aws"]; !ok || m["_aws"] != nil {
		t.Fatalf("directive moved out of its group: %s", got.Bytes())
	}
}

func BenchmarkRequestLineHandler(b *testing.B) {
	e := &EMF{Namespace: DefaultNamespace, Fixed: map[string]string{DimFunction: "push"}}
	logger := slog.New(NewJSONHandler(discard{}, nil)).With("function", "push")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		logger.LogAttrs(ctx, slog.LevelInfo, "request", e.RequestLine(requestAttrs())...)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
