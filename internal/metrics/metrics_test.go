package metrics

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func logLine(t *testing.T, e *EMF, attrs ...slog.Attr) []byte {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).With("function", "push").LogAttrs(t.Context(), slog.LevelInfo, "request", e.RequestLine(attrs)...)
	return bytes.TrimSpace(buf.Bytes())
}

// The request line is a valid EMF document: derived counters, the
// catalogue's units and dimension sets, partition as a plain property.
func TestRequestLineIsEMF(t *testing.T) {
	e := &EMF{Namespace: "Test/NS", Fixed: map[string]string{DimFunction: "push"}, Now: func() time.Time { return time.UnixMilli(1_800_000_000_000) }}
	line := logLine(t, e,
		slog.Int("status", 429), slog.String("partition", "tenant-1"), slog.String("route", "sync"),
		slog.String("errorCode", "sync.rate_limited"), slog.Float64("ms", 12.5),
		slog.Int("applied", 0), slog.Float64("rcu", 3), slog.Int64("segmentsBuilt", 0),
		slog.String("notAMetric", "x"))
	doc, err := Parse(line)
	if err != nil {
		t.Fatalf("%v\n%s", err, line)
	}
	if doc.Namespace() != "Test/NS" {
		t.Errorf("namespace %q", doc.Namespace())
	}
	// softTimeouts and serverErrors are absent (a 429 the deadline did
	// not stop): a missing counter adds nothing to its sum.
	// rcu is a plain field (no longer a metric); ms needs no unit.
	want := []string{"rateLimited", "ms", "applied", "segmentsBuilt"}
	got := doc.Declared()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("declared %v, want %v", got, want)
	}
	for _, name := range []string{"softTimeouts", "serverErrors"} {
		if _, ok := doc.Number(name); ok {
			t.Errorf("%s written on a request it does not count: %s", name, line)
		}
	}
	for name, v := range map[string]float64{"rateLimited": 1, "ms": 12.5} {
		if n, ok := doc.Number(name); !ok || n != v {
			t.Errorf("%s = %v (%t), want %v", name, n, ok, v)
		}
	}
	if doc["partition"] != "tenant-1" {
		t.Errorf("partition property lost: %s", line)
	}
	if !strings.Contains(string(line), `"Timestamp":1800000000000`) {
		t.Errorf("timestamp: %s", line)
	}
	// A metric of unit None has a definition without Unit (EMF's
	// default); the others name theirs.
	if !strings.Contains(string(line), `{"Name":"ms"}`) || !strings.Contains(string(line), `{"Name":"rateLimited","Unit":"Count"}`) {
		t.Errorf("definitions: %s", line)
	}
}

// A 5xx stopped by the deadline counts as a server error and a soft timeout.
func TestRequestLineCounters(t *testing.T) {
	e := &EMF{Namespace: "N", Fixed: map[string]string{DimFunction: "pull"}}
	doc, err := Parse(logLine(t, e, slog.Int("status", 500), slog.String("route", "pull"), slog.Float64("ms", 1),
		slog.String("errorCode", "sync.internal_error"), slog.Bool("deadlineExceeded", true)))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"ms": 1, "serverErrors": 1, "softTimeouts": 1} {
		if n, _ := doc.Number(name); n != v {
			t.Errorf("%s = %v, want %v", name, n, v)
		}
	}
	if _, ok := doc.Number("rateLimited"); ok {
		t.Errorf("rateLimited written on a request that was not rate limited")
	}
}

// A line without its dimension field declares no metric (CloudWatch
// rejects a directive naming an absent dimension).
func TestMissingDimensionDeclaresNothing(t *testing.T) {
	var buf bytes.Buffer
	e := &EMF{Namespace: "N"}
	slog.New(slog.NewJSONHandler(&buf, nil)).LogAttrs(t.Context(), slog.LevelInfo, "request", e.RequestLine([]slog.Attr{slog.Int("status", 200), slog.Int("applied", 2)})...)
	if strings.Contains(buf.String(), "_aws") {
		t.Errorf("directive without its dimension: %s", buf.String())
	}
}

// Parse rejects what CloudWatch would reject or what breaks the rules.
func TestParseRejects(t *testing.T) {
	for name, line := range map[string]string{
		"no _aws":           `{"ms":1}`,
		"seconds timestamp": `{"_aws":{"Timestamp":1800000000,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["function"]],"Metrics":[{"Name":"applied","Unit":"Count"}]}]},"function":"f","applied":1}`,
		"unknown metric":    `{"_aws":{"Timestamp":1800000000000,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["function"]],"Metrics":[{"Name":"bogus","Unit":"Count"}]}]},"function":"f","bogus":1}`,
		"partition dim":     `{"_aws":{"Timestamp":1800000000000,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["partition"]],"Metrics":[{"Name":"applied","Unit":"Count"}]}]},"partition":"p","applied":1}`,
		"string value":      `{"_aws":{"Timestamp":1800000000000,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["function"]],"Metrics":[{"Name":"applied","Unit":"Count"}]}]},"function":"f","applied":"1"}`,
		"wrong unit":        `{"_aws":{"Timestamp":1800000000000,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["function"]],"Metrics":[{"Name":"applied","Unit":"Bytes"}]}]},"function":"f","applied":1}`,
	} {
		if _, err := Parse([]byte(line)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Names are unique and every dimension set starts with the function.
func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Catalogue {
		if seen[m.Name] || m.Name == "" || m.Help == "" {
			t.Errorf("bad or duplicate entry %+v", m)
		}
		seen[m.Name] = true
		for _, set := range m.Dimensions {
			if len(set) == 0 || set[0] != DimFunction {
				t.Errorf("%s: dimension set %v", m.Name, set)
			}
		}
	}
}
