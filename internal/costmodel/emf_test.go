package costmodel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// datapoint is one metric value CloudWatch extracts from an EMF event.
type datapoint struct {
	namespace, name, unit string
	dims                  map[string]string
	values                []float64
}

// cloudWatchUnits are the units a metric definition may name.
var cloudWatchUnits = map[string]bool{}

func init() {
	for _, u := range strings.Fields(`Seconds Microseconds Milliseconds Bytes Kilobytes Megabytes Gigabytes Terabytes
		Bits Kilobits Megabits Gigabits Terabits Percent Count Bytes/Second Kilobytes/Second Megabytes/Second
		Gigabytes/Second Terabytes/Second Bits/Second Kilobits/Second Megabits/Second Gigabits/Second
		Terabits/Second Count/Second None`) {
		cloudWatchUnits[u] = true
	}
}

// extractEMF applies the Embedded Metric Format specification's rules to
// one log event the way CloudWatch Logs does, returning the datapoints or
// why the event would be rejected: a root object whose "_aws" member has a
// Timestamp (epoch milliseconds) and a CloudWatchMetrics array of
// directives; each directive names a Namespace, Dimensions (an array of
// dimension sets of at most 30 member names, each a root string member)
// and Metrics (1–100 definitions, each a Name of a root member holding a
// number or an array of at most 100 numbers, and an optional valid Unit).
// One datapoint per metric per dimension set.
func extractEMF(line []byte) ([]datapoint, error) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(line, &root); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var meta struct {
		Timestamp         *int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	}
	raw, ok := root["_aws"]
	if !ok {
		return nil, fmt.Errorf("no _aws member")
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("_aws: %w", err)
	}
	if meta.Timestamp == nil || *meta.Timestamp < 1e12 {
		return nil, fmt.Errorf("_aws.Timestamp missing or not epoch milliseconds")
	}
	if len(meta.CloudWatchMetrics) == 0 {
		return nil, fmt.Errorf("no metric directive")
	}
	str := func(name string) (string, bool) {
		var s string
		if json.Unmarshal(root[name], &s) != nil || s == "" || len(s) > 1024 {
			return "", false
		}
		return s, true
	}
	var out []datapoint
	for _, d := range meta.CloudWatchMetrics {
		if d.Namespace == "" || len(d.Namespace) > 255 {
			return nil, fmt.Errorf("bad namespace %q", d.Namespace)
		}
		if len(d.Metrics) == 0 || len(d.Metrics) > 100 {
			return nil, fmt.Errorf("%d metric definitions", len(d.Metrics))
		}
		for _, set := range d.Dimensions {
			if len(set) > 30 {
				return nil, fmt.Errorf("dimension set of %d", len(set))
			}
			dims := map[string]string{}
			for _, k := range set {
				v, ok := str(k)
				if !ok {
					return nil, fmt.Errorf("dimension %q is not a root string member", k)
				}
				dims[k] = v
			}
			for _, m := range d.Metrics {
				if m.Unit != "" && !cloudWatchUnits[m.Unit] {
					return nil, fmt.Errorf("metric %s: unit %q", m.Name, m.Unit)
				}
				var one float64
				var many []float64
				switch {
				case json.Unmarshal(root[m.Name], &one) == nil:
					many = []float64{one}
				case json.Unmarshal(root[m.Name], &many) == nil && len(many) > 0 && len(many) <= 100:
				default:
					return nil, fmt.Errorf("metric %s: member is not a number or array of numbers", m.Name)
				}
				out = append(out, datapoint{d.Namespace, m.Name, m.Unit, dims, many})
			}
		}
	}
	return out, nil
}

// alarmMetric is a metric of the functions' namespace an alarm reads.
type alarmMetric struct {
	alarm, name, stat, function string
}

// templateAlarmMetrics reads every alarm of template.yaml for the metrics
// of the functions' namespace (!Ref MetricsNamespace) it reads, with the
// statistic and the function dimension.
func templateAlarmMetrics(t *testing.T) []alarmMetric {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string    `yaml:"Type"`
			Properties yaml.Node `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	type metric struct {
		Namespace  yaml.Node `yaml:"Namespace"`
		MetricName string    `yaml:"MetricName"`
		Dimensions []struct {
			Name  string    `yaml:"Name"`
			Value yaml.Node `yaml:"Value"` // a function name, or an intrinsic (the table's)
		} `yaml:"Dimensions"`
	}
	var out []alarmMetric
	add := func(alarm string, m metric, stat string) {
		if m.Namespace.Tag != "!Ref" || m.Namespace.Value != "MetricsNamespace" {
			return
		}
		am := alarmMetric{alarm: alarm, name: m.MetricName, stat: stat}
		for _, d := range m.Dimensions {
			if d.Name == "function" {
				am.function = d.Value.Value
			}
		}
		out = append(out, am)
	}
	for id, res := range tpl.Resources {
		if res.Type != "AWS::CloudWatch::Alarm" {
			continue
		}
		var p struct {
			metric    `yaml:",inline"`
			Statistic string `yaml:"Statistic"`
			Metrics   []struct {
				MetricStat *struct {
					Metric metric `yaml:"Metric"`
					Stat   string `yaml:"Stat"`
				} `yaml:"MetricStat"`
			} `yaml:"Metrics"`
		}
		if err := res.Properties.Decode(&p); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if p.MetricName != "" {
			add(id, p.metric, p.Statistic)
		}
		for _, m := range p.Metrics {
			if m.MetricStat != nil {
				add(id, m.MetricStat.Metric, m.MetricStat.Stat)
			}
		}
	}
	return out
}

// maxLine is issue 23's target for an ordinary request line (push
// round, pull, quiet pull, segment download) at info, in bytes.
const maxLine = 300

// The request lines the functions write at info over DynamoDB Local, for
// a one-operation push round, a quiet pull, an incremental pull, a
// bootstrap with its segment downloads and an unauthenticated pull,
// decoded as CloudWatch does: each at most 300 bytes (the ordinary ones),
// and carrying every metric the template's alarms read for its function
// with the value the alarm needs: one datapoint of a metric read by
// SampleCount (the request count) on every line, and a counter read by
// Sum equal to what the request was (absent counts as zero). That a 5xx,
// rate-limited or soft-timed-out line writes its counter as 1 is
// TestRequestLineCounters (internal/metrics).
func TestRequestLinesKeepAlarmMetrics(t *testing.T) {
	alarms := templateAlarmMetrics(t)
	if len(alarms) < 10 {
		t.Fatalf("only %d alarm metrics of the functions' namespace: %v", len(alarms), alarms)
	}
	r := newRig(t)
	cursor := r.pullAll(t, "dev", -1)
	cursor = r.pushRound(t, "dev", r.tasks(t, 1), cursor) // warm

	type captured struct {
		what, fn string
		line     []byte
		ordinary bool
	}
	var lines []captured
	take := func(what, fn string, ordinary bool) {
		t.Helper()
		line := bytes.TrimSpace(r.logs[fn].last)
		if len(line) == 0 {
			t.Fatalf("%s: no request line from %s", what, fn)
		}
		lines = append(lines, captured{what, fn, slices.Clone(line), ordinary})
		r.logs[fn].last = nil
	}
	cursor = r.pushRound(t, "dev", r.tasks(t, 1), cursor)
	take("one-op push round", "push", true)
	cursor = r.pullAll(t, "dev", cursor)
	take("quiet pull", "pull", true)
	for range 3 {
		r.commits++
		r.d.Push(t, r.tok, "dev-3", r.epoch, wire.PushCommit{ClientCommitID: fmt.Sprintf("a%d", r.commits), Operations: r.tasks(t, 1)})
	}
	// pullAll ends with a quiet pull: the first of its lines is the
	// one that delivered the three commits.
	r.logs["pull"].last = nil
	s := sub(cursor)
	r.d.Pull(t, r.tok, "dev", r.epoch, accept, s)
	take("incremental pull", "pull", true)
	for range 4 {
		r.commits++
		r.d.Push(t, r.tok, "seed", r.epoch, wire.PushCommit{ClientCommitID: fmt.Sprintf("b%d", r.commits), Operations: r.tasks(t, 50)})
	}
	// A bootstrap page as a SEGMENT_REF (the client takes no inline
	// rows), downloaded through the segment function.
	boot := r.d.Pull(t, r.tok, "fresh", r.epoch, wire.PullHeader{Accept: wire.AcceptExternalRows}, sub(-1))
	if len(boot.Refs) == 0 {
		t.Fatal("bootstrap without a SEGMENT_REF")
	}
	if resp := r.d.Direct(t, r.tok, boot.Refs[0].SegmentID, map[string][]string{"project_id": {"p1"}}); resp.StatusCode != 200 {
		t.Fatalf("segment download: HTTP %d", resp.StatusCode)
	}
	take("segment download", "segment", true)
	if resp := r.d.Call(t, "pull", "/pull", "", []byte("x"), nil); resp.StatusCode != 401 {
		t.Fatalf("unauthenticated pull: HTTP %d", resp.StatusCode)
	}
	take("unauthenticated pull", "pull", false)

	for _, c := range lines {
		points, err := extractEMF(c.line)
		if err != nil {
			t.Fatalf("%s: CloudWatch would reject the line: %v\n%s", c.what, err, c.line)
		}
		var fields map[string]any
		if err := json.Unmarshal(c.line, &fields); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes: %s", c.what, len(c.line), c.line)
		if c.ordinary && len(c.line) > maxLine {
			t.Errorf("%s: %d bytes, over %d", c.what, len(c.line), maxLine)
		}
		status, _ := fields["status"].(float64)
		code, _ := fields["errorCode"].(string)
		want := map[string]float64{
			"serverErrors": b2f(status >= 500),
			"rateLimited":  b2f(code == "sync.rate_limited"),
			"softTimeouts": b2f(fields["deadlineExceeded"] == true),
		}
		for _, am := range alarms {
			if am.function != c.fn {
				continue
			}
			var got []float64
			for _, p := range points {
				if p.name == am.name && p.dims["function"] == c.fn {
					got = append(got, p.values...)
				}
			}
			switch am.stat {
			case "SampleCount":
				if len(got) != 1 {
					t.Errorf("%s: %s reads the SampleCount of %s; the line has %d datapoints of it", c.what, am.alarm, am.name, len(got))
				}
			case "Sum":
				v, known := want[am.name]
				if !known {
					t.Errorf("%s: %s reads the Sum of %s, which this test does not know the value of", c.what, am.alarm, am.name)
					continue
				}
				sum := 0.0
				for _, g := range got {
					sum += g
				}
				if sum != v {
					t.Errorf("%s: %s reads the Sum of %s: %v on the line, want %v", c.what, am.alarm, am.name, sum, v)
				}
			default:
				t.Errorf("%s reads %s of %s", am.alarm, am.stat, am.name)
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The request line of a quiet pull and of a one-operation push round, as
// the functions write them at info over DynamoDB Local, decoded as
// CloudWatch does: every metric one datapoint with the function dimension,
// each equal to what the request did (the commits applied, the COMMIT
// frames sent), a counter left out only when it is zero, the duration on
// both; and the line's length, measured.
func TestRequestLineDecodesAsCloudWatch(t *testing.T) {
	r := newRig(t)
	cursor := r.pullAll(t, "dev", -1)
	cursor = r.pushRound(t, "dev", r.tasks(t, 1), cursor) // warm

	type want struct {
		fn     string
		values map[string]float64
	}
	check := func(what string, w want) {
		t.Helper()
		line := bytes.TrimSpace(r.logs[w.fn].last)
		points, err := extractEMF(line)
		if err != nil {
			t.Fatalf("%s: CloudWatch would reject the line: %v\n%s", what, err, line)
		}
		got := map[string]float64{}
		for _, p := range points {
			if p.namespace != "Syncular" || len(p.dims) != 1 || p.dims["function"] != w.fn || len(p.values) != 1 {
				t.Errorf("%s: datapoint %+v", what, p)
			}
			got[p.name] += p.values[0]
		}
		for name, v := range w.values {
			if got[name] != v {
				t.Errorf("%s: metric %s = %v, want %v", what, name, got[name], v)
			}
		}
		for name, v := range got {
			if _, ok := w.values[name]; !ok && name != "ms" && v != 0 {
				t.Errorf("%s: unexpected metric %s = %v", what, name, v)
			}
		}
		if _, ok := got["ms"]; !ok {
			t.Errorf("%s: no ms", what)
		}
		t.Logf("%s: %d bytes: %s", what, len(line), line)
		if len(line) > maxLine {
			t.Errorf("%s: line of %d bytes", what, len(line))
		}
	}
	frames := func(body []byte) (commits float64) {
		m := apptest.Decode(t, body)
		return float64(len(apptest.Find[*wire.Commit](m)))
	}

	cursor = r.pushRound(t, "dev", r.tasks(t, 1), cursor)
	check("one-op push round", want{"push", map[string]float64{"applied": 1, "sent": frames(r.lastBody)}})

	cursor = r.pullAll(t, "dev", cursor)
	r.pullAll(t, "dev", cursor)
	check("quiet pull", want{"pull", map[string]float64{"serverErrors": 0}})
}
