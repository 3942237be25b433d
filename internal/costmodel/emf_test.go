package costmodel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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

// The request line of a quiet pull and of a one-operation push round, as
// the functions write them at info over DynamoDB Local, decoded as
// CloudWatch does: every metric one datapoint with the function dimension
// and its unit, each equal to what the request did (the response's
// frames and size, the DynamoDB calls the store made), a counter left
// out only when it is zero; and the line's length, measured.
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
			if p.namespace != "Syncular" || len(p.dims) != 1 || p.dims["function"] != w.fn || p.unit == "" || len(p.values) != 1 {
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
			if _, ok := w.values[name]; !ok && name != "durationMs" && v != 0 {
				t.Errorf("%s: unexpected metric %s = %v", what, name, v)
			}
		}
		if _, ok := got["durationMs"]; !ok {
			t.Errorf("%s: no durationMs", what)
		}
		t.Logf("%s: %d bytes: %s", what, len(line), line)
		// The line is less than half of the 1,473 bytes a quiet pull's
		// line took before it was shortened.
		if len(line) > 1473/2 {
			t.Errorf("%s: line of %d bytes", what, len(line))
		}
	}
	frames := func(body []byte) (commits float64) {
		m := apptest.Decode(t, body)
		return float64(len(apptest.Find[*wire.Commit](m)))
	}

	cursor = r.pushRound(t, "dev", r.tasks(t, 1), cursor)
	u := r.lastUsage
	w := want{"push", map[string]float64{"requests": 1, "applied": 1,
		"commitsSent": frames(r.lastBody), "bytesOut": float64(len(r.lastBody)),
		"ddbRoundTrips": float64(u.RoundTrips), "rcu": u.RCU, "wcu": u.WCU}}
	check("one-op push round", w)

	cursor = r.pullAll(t, "dev", cursor)
	r.pullAll(t, "dev", cursor)
	u = r.lastUsage
	check("quiet pull", want{"pull", map[string]float64{"requests": 1, "serverErrors": 0,
		"bytesOut": float64(len(r.lastBody)), "ddbRoundTrips": float64(u.RoundTrips), "rcu": u.RCU, "wcu": u.WCU}})
}
