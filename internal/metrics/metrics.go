// Package metrics is the one catalogue of the CloudWatch metrics the
// functions publish, and the writer of their Embedded Metric Format (EMF)
// directives.
//
// A metric is a numeric field of a JSON log line whose name is the metric
// name; the line's "_aws" member tells CloudWatch Logs which fields to turn
// into metrics, with which unit and dimensions. So the per-request log line
// is itself the EMF document: one line per request, carrying both the
// fields an operator queries in Logs Insights and the metrics alarms watch.
//
// The one dimension is the function. Route and outcome, and the
// partition, actor and client ids, stay plain properties of the line
// (the ids as dimensions would create one metric per tenant).
//
// template.yaml's alarms and dashboard name metrics from Catalogue; a test
// (functions/template_test.go) fails when one is not in it.
package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// DefaultNamespace is the CloudWatch namespace unless configured
// (SYNC_METRICS_NAMESPACE, template parameter MetricsNamespace).
const DefaultNamespace = "Syncular"

// Unit is a CloudWatch metric unit.
type Unit string

// The units the catalogue uses. None is EMF's default unit: the
// definition names no Unit, which keeps the directive of every request
// line short (the metrics on every line use it; their names say what
// they count).
const (
	None         Unit = ""
	Count        Unit = "Count"
	Milliseconds Unit = "Milliseconds"
	Bytes        Unit = "Bytes"
)

// Dimension names. Each is a string field of the log line.
const (
	// DimFunction is the function's short name (app.Function.Name).
	DimFunction = "function"
	// DimRoute is the endpoint family: sync, push, pull, segments, other
	// (a field of the request line, no longer a dimension).
	DimRoute = "route"
	// DimOutcome is "ok", or the §10 error code the request ended with
	// (HTTP error or in-band ERROR frame); a field of debug lines (info
	// lines carry ErrorCodeField on failure only), never a dimension.
	DimOutcome = "outcome"
)

// Every metric has one dimension set, the function: a second set (the
// route and outcome) doubled the directive of every request line, and
// what it split is in the line's route and outcome fields for Logs
// Insights. DimRoute and DimOutcome stay plain string fields.
var byFunction = [][]string{{DimFunction}}

// Metric is one catalogue entry.
type Metric struct {
	// Name is both the metric name and the log field carrying its value.
	Name string
	Unit Unit
	// Dimensions are the dimension sets CloudWatch aggregates it by.
	Dimensions [][]string
	// Help is the one-line description (docs/OPERATIONS.md lists them).
	Help string
}

// The catalogue. Request metrics come from every HTTP function's request
// line; prune metrics from the scheduled prune function's run line.
//
// The metrics on an ordinary request line have short names and no unit:
// each costs its name twice on every line (the field and its definition
// in the directive), billed as log ingestion on every request. There is
// no request counter: every request line carries ms exactly once, so
// its SampleCount is the number of requests (the alarms' denominator).
var (
	ServerErrors    = Metric{"serverErrors", Count, byFunction, "Requests answered with a 5xx status."}
	RateLimited     = Metric{"rateLimited", Count, byFunction, "Requests that ended with sync.rate_limited (HTTP 429 or in-band)."}
	SchemaNotReady  = Metric{"schemaNotReady", Count, byFunction, "Requests refused with sync.schema_not_ready (HTTP 503, retryable) during a rolling schema upgrade; not serverErrors."}
	Forwarded       = Metric{"forwarded", Count, byFunction, "Requests the serve gate refused that a newer build of the function answered instead (forwarded during a rolling schema upgrade or after its rollback)."}
	SoftTimeouts    = Metric{"softTimeouts", Count, byFunction, "Requests stopped by the soft deadline before the function timeout."}
	Duration        = Metric{"ms", None, byFunction, "Milliseconds serving the request (engine and storage); its SampleCount is the number of requests."}
	CommitsApplied  = Metric{"applied", None, byFunction, "Pushed commits newly applied."}
	CommitRacesLost = Metric{"commitRacesLost", Count, byFunction, "Commit attempts that lost the race for the next commitSeq and were retried."}
	CommitsSent     = Metric{"sent", None, byFunction, "COMMIT frames returned by pulls."}
	// Group commit (issue 20): a queued waiter offers its evaluated
	// commit; the turn's holder carries offered commits in its own
	// transaction or leaves them out (they commit in their own turns).
	GroupOffered     = Metric{"offered", None, byFunction, "Commits a queued push offered to the turn's holder for its group commit."}
	GroupCarried     = Metric{"carried", None, byFunction, "Other pushes' offered commits a push landed in its own transaction (group commit)."}
	GroupLeftOut     = Metric{"leftOut", None, byFunction, "Offered commits a push read but left out of its transaction (rows changed, over 100 items / 4 MB): they commit in their own turns."}
	Grouped          = Metric{"grouped", None, byFunction, "Commits of a push that another push's transaction landed (group commit)."}
	RowsScanned      = Metric{"rowsScanned", Count, byFunction, "Rows read by bootstrap page builds."}
	RowsDelivered    = Metric{"rowsDelivered", Count, byFunction, "Rows in the bootstrap pages sent (built or reused)."}
	SegmentsBuilt    = Metric{"segmentsBuilt", Count, byFunction, "Bootstrap pages built from a row scan."}
	SegmentsReused   = Metric{"segmentsReused", Count, byFunction, "Bootstrap pages answered with an existing segment publication (§5.1)."}
	PrunedPartitions = Metric{"prunedPartitions", Count, byFunction, "Partitions a prune run visited successfully."}
	PrunedCommits    = Metric{"prunedCommits", Count, byFunction, "Commits a prune run deleted."}
	PruneFailures    = Metric{"pruneFailures", Count, byFunction, "Partitions a prune run failed on, plus 1 when the registry could not be read."}
	PruneIncomplete  = Metric{"pruneIncomplete", Count, byFunction, "1 when a prune run stopped at its deadline with partitions left (the next run resumes)."}
	BlobsSwept       = Metric{"blobsSwept", Count, byFunction, "Orphaned blob objects a prune run deleted after finishing a pass (§5.9.2 sweep)."}
	LeaseServed      = Metric{"leaseServed", Count, byFunction, "Rounds authorized by the client's auth lease because the scope resolver was unavailable (§7.3.3, SYNC_AUTH_LEASES=on)."}
	RequestsOverCap  = Metric{"requestsOverCap", Count, byFunction, "Requests refused with 413 because the body exceeds a request cap (as sent, or SYNC_MAX_BODY_BYTES decoded); with function=gateway, every 413 in the HTTP API's access log."}
	// Connections is the realtime tier's autoscaling metric: every task
	// writes its open sockets once a minute (function=realtime), so the
	// Average over a minute is the count per task.
	Connections = Metric{"connections", Count, byFunction, "Open realtime sockets of one tier task (a line a minute per task)."}
)

// FunctionGateway is the function dimension of the metrics the template
// derives from the HTTP API's access log (a metric filter) rather than a
// function's request line: what API Gateway answered, including the
// requests it refused itself before any function ran.
const FunctionGateway = "gateway"

// Catalogue lists every metric the code emits.
var Catalogue = []Metric{
	ServerErrors, RateLimited, SchemaNotReady, Forwarded, SoftTimeouts, Duration,
	CommitsApplied, CommitRacesLost, CommitsSent, RowsScanned, RowsDelivered,
	GroupCarried, GroupLeftOut, Grouped,
	SegmentsBuilt, SegmentsReused,
	PrunedPartitions, PrunedCommits, PruneFailures, PruneIncomplete, BlobsSwept,
	RequestsOverCap, LeaseServed,
	Connections,
}

// Lookup returns the catalogue entry named name.
func Lookup(name string) (Metric, bool) {
	for _, m := range Catalogue {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// EMF adds Embedded Metric Format directives to log lines.
type EMF struct {
	Namespace string
	// Fixed are string fields the logger itself adds to every line
	// (slog.Logger.With), e.g. {"function": "push"}: they can be
	// dimensions although the line's own attributes lack them.
	Fixed map[string]string
	// Now is the clock of the directive's timestamp (nil: time.Now).
	Now func() time.Time
}

// Annotate returns attrs plus the "_aws" member declaring every catalogue
// metric present among attrs (a numeric attribute of that name). A metric
// whose dimension fields are missing is left out, so the directive never
// references a field the line lacks (CloudWatch rejects such documents).
//
// The directive depends only on which catalogue metrics are declared, so
// its JSON is built once per such set and reused (the per-request line
// is on every function's hot path); only the timestamp is per line.
func (e *EMF) Annotate(attrs []slog.Attr) []slog.Attr {
	if e == nil {
		return attrs
	}
	// Last value wins, as in a JSON object with repeated members: the
	// fixed fields first, then the line's own attributes.
	var present uint64
	var dims [maxDims]slog.Value
	for k, v := range e.Fixed {
		if d, ok := dimIndex[k]; ok {
			dims[d] = slog.StringValue(v)
		}
		if i, ok := metricIndex[k]; ok {
			present &^= 1 << i // a string is never a metric value
		}
	}
	for _, a := range attrs {
		if d, ok := dimIndex[a.Key]; ok {
			dims[d] = a.Value.Resolve()
		}
		if i, ok := metricIndex[a.Key]; ok {
			if numeric(a.Value.Resolve()) {
				present |= 1 << i
			} else {
				present &^= 1 << i
			}
		}
	}
	var declared uint64
	for i, m := range Catalogue {
		if present&(1<<i) == 0 {
			continue
		}
		usable := true
		for _, set := range m.Dimensions {
			for _, d := range set {
				if dv := dims[dimIndex[d]]; dv.Kind() != slog.KindString || dv.String() == "" {
					usable = false
				}
			}
		}
		if usable {
			declared |= 1 << i
		}
	}
	if declared == 0 {
		return attrs
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	d := e.directives(declared)
	return append(attrs, slog.Any("_aws", directive{ts: now().UnixMilli(), metrics: d.json, names: d.names}))
}

// cachedDirective is the JSON of a CloudWatchMetrics array and the
// comma-separated names of the metrics it declares.
type cachedDirective struct {
	json, names []byte
}

// directives returns the CloudWatchMetrics array declaring the catalogue
// metrics of the set bits of declared, built once per set.
func (e *EMF) directives(declared uint64) cachedDirective {
	key := directiveKey{e.Namespace, declared}
	if d, ok := directiveCache.Load(key); ok {
		return d.(cachedDirective)
	}
	var names []byte
	type group struct {
		dims    [][]string
		metrics []map[string]string
	}
	var groups []*group
	find := func(dims [][]string) *group {
		for _, g := range groups {
			if sameDims(g.dims, dims) {
				return g
			}
		}
		g := &group{dims: dims}
		groups = append(groups, g)
		return g
	}
	for i, m := range Catalogue {
		if declared&(1<<i) != 0 {
			if len(names) > 0 {
				names = append(names, ',')
			}
			names = append(names, m.Name...)
			g := find(m.Dimensions)
			def := map[string]string{"Name": m.Name}
			if m.Unit != None {
				def["Unit"] = string(m.Unit)
			}
			g.metrics = append(g.metrics, def)
		}
	}
	list := make([]any, 0, len(groups))
	for _, g := range groups {
		list = append(list, map[string]any{
			"Namespace":  e.Namespace,
			"Dimensions": g.dims,
			"Metrics":    g.metrics,
		})
	}
	b, err := json.Marshal(list)
	if err != nil {
		panic(fmt.Sprintf("metrics: directive: %v", err)) // strings and string slices only
	}
	// Namespaces are configuration and the sets a subset of a 20-metric
	// catalogue the code declares in a handful of combinations: bounded.
	d := cachedDirective{json: b, names: names}
	directiveCache.Store(key, d)
	return d
}

type directiveKey struct {
	namespace string
	declared  uint64
}

var directiveCache sync.Map // directiveKey → cachedDirective

// directive is the "_aws" member's value: {"CloudWatchMetrics":[…],
// "Timestamp":ms}, written from the cached metrics JSON. It marshals as
// JSON for the Lambda functions' JSON handler and as the same text for a
// text handler (the local runner).
type directive struct {
	ts      int64
	metrics []byte
	names   []byte
}

func (d directive) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(d.metrics)+48)
	b = append(b, `{"CloudWatchMetrics":`...)
	b = append(b, d.metrics...)
	b = append(b, `,"Timestamp":`...)
	b = strconv.AppendInt(b, d.ts, 10)
	return append(b, '}'), nil
}

// MarshalText is the directive in a text log (the local runner's):
// CloudWatch never reads it, so instead of JSON that a text handler
// would quote and escape it lists the declared metric names.
func (d directive) MarshalText() ([]byte, error) { return d.names, nil }

// metricIndex and dimIndex number the catalogue's metrics (bit positions
// of a declared set) and the dimension names they use.
var (
	metricIndex = map[string]int{}
	dimIndex    = map[string]int{}
)

const maxDims = 8

func init() {
	if len(Catalogue) > 64 {
		panic("metrics: more than 64 catalogue metrics")
	}
	for i, m := range Catalogue {
		metricIndex[m.Name] = i
		for _, set := range m.Dimensions {
			for _, d := range set {
				if _, ok := dimIndex[d]; !ok {
					dimIndex[d] = len(dimIndex)
				}
			}
		}
	}
	if len(dimIndex) > maxDims {
		panic("metrics: more dimension names than maxDims")
	}
}

func numeric(v slog.Value) bool {
	switch v.Kind() {
	case slog.KindInt64, slog.KindUint64, slog.KindFloat64:
		return true
	}
	return false
}

func sameDims(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

// RequestLine derives the per-request counters from a request line's
// fields (status, errorCode, deadlineExceeded) and adds the EMF
// directive: serverErrors, schemaNotReady, rateLimited and softTimeouts
// 1 on the lines they count and absent otherwise (a sync.schema_not_ready
// 503 is schemaNotReady, not serverErrors). A metric absent from a line
// adds nothing to its Sum, so sums stay exact (the template reads these
// counters by Sum only); a minute without a server error has no
// serverErrors datapoint, which the error-rate alarms treat as not
// breaching (TreatMissingData), as they would a zero. The number of
// requests is the SampleCount of ms, which every request line carries.
func (e *EMF) RequestLine(attrs []slog.Attr) []slog.Attr {
	var status int64
	var rateLimited, notReady, deadline bool
	for _, a := range attrs {
		v := a.Value.Resolve()
		switch a.Key {
		case "status":
			if v.Kind() == slog.KindInt64 {
				status = v.Int64()
			}
		case ErrorCodeField, DimOutcome:
			rateLimited = rateLimited || v.String() == string(syncerr.RateLimited)
			notReady = notReady || v.String() == string(syncerr.SchemaNotReady)
		case "deadlineExceeded":
			deadline = v.Kind() == slog.KindBool && v.Bool()
		}
	}
	switch {
	case notReady:
		// An intended, retryable refusal of a rolling upgrade (the
		// serve gate): counted on its own, never on the metric the
		// deployment's rollback alarms watch.
		attrs = append(attrs, slog.Int(SchemaNotReady.Name, 1))
	case status >= 500:
		attrs = append(attrs, slog.Int(ServerErrors.Name, 1))
	}
	if rateLimited {
		attrs = append(attrs, slog.Int(RateLimited.Name, 1))
	}
	if deadline {
		attrs = append(attrs, slog.Int(SoftTimeouts.Name, 1))
	}
	return e.Annotate(attrs)
}

// ErrorCodeField is the request line's field naming the §10 code a
// request ended with (an HTTP error's, or an in-band ERROR frame's in a
// 200 response); absent when it succeeded.
const ErrorCodeField = "errorCode"

// Document is one decoded EMF log line.
type Document map[string]any

// Parse decodes line and checks it against the EMF specification and the
// catalogue: a "_aws" member with a millisecond Timestamp and metric
// directives, each naming a namespace, dimension sets whose fields are
// non-empty strings of the line, and metrics whose fields are numbers of
// the line, every one a catalogue metric with its catalogue unit and
// dimensions. Properties that would explode cardinality (partition, actor,
// clientId, requestId) are never dimensions. Tests use it on real output.
func Parse(line []byte) (Document, error) {
	var doc Document
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("metrics: not a JSON object: %w", err)
	}
	aws, ok := doc["_aws"].(map[string]any)
	if !ok {
		return nil, errors.New("metrics: no _aws object")
	}
	if ts, ok := aws["Timestamp"].(json.Number); !ok {
		return nil, errors.New("metrics: _aws.Timestamp is not a number")
	} else if ms, err := ts.Int64(); err != nil || ms < 1e12 {
		return nil, fmt.Errorf("metrics: _aws.Timestamp %v is not epoch milliseconds", ts)
	}
	dirs, ok := aws["CloudWatchMetrics"].([]any)
	if !ok || len(dirs) == 0 {
		return nil, errors.New("metrics: _aws.CloudWatchMetrics is not a non-empty array")
	}
	for _, d := range dirs {
		dir, ok := d.(map[string]any)
		if !ok {
			return nil, errors.New("metrics: a metric directive is not an object")
		}
		if ns, ok := dir["Namespace"].(string); !ok || ns == "" {
			return nil, errors.New("metrics: directive without a Namespace")
		}
		sets, ok := dir["Dimensions"].([]any)
		if !ok {
			return nil, errors.New("metrics: directive Dimensions is not an array")
		}
		var dims [][]string
		for _, s := range sets {
			set, ok := s.([]any)
			if !ok || len(set) > 30 {
				return nil, errors.New("metrics: a dimension set is not an array of at most 30 names")
			}
			var names []string
			for _, n := range set {
				name, _ := n.(string)
				if v, ok := doc[name].(string); !ok || v == "" {
					return nil, fmt.Errorf("metrics: dimension %q is not a non-empty string field", name)
				}
				switch name {
				case "partition", "actor", "clientId", "requestId":
					return nil, fmt.Errorf("metrics: %q must stay a property, not a dimension", name)
				}
				names = append(names, name)
			}
			dims = append(dims, names)
		}
		ms, ok := dir["Metrics"].([]any)
		if !ok || len(ms) == 0 || len(ms) > 100 {
			return nil, errors.New("metrics: directive Metrics is not an array of 1 to 100 entries")
		}
		for _, m := range ms {
			def, _ := m.(map[string]any)
			name, _ := def["Name"].(string)
			unit, _ := def["Unit"].(string)
			cat, ok := Lookup(name)
			if !ok {
				return nil, fmt.Errorf("metrics: %q is not in the catalogue", name)
			}
			if unit != string(cat.Unit) || !sameDims(dims, cat.Dimensions) {
				return nil, fmt.Errorf("metrics: %q declared with unit %q and dimensions %v, catalogue says %q and %v", name, unit, dims, cat.Unit, cat.Dimensions)
			}
			if _, ok := doc[name].(json.Number); !ok {
				return nil, fmt.Errorf("metrics: field %q is not a number", name)
			}
		}
	}
	return doc, nil
}

// Declared returns the metric names the document's directives declare.
func (d Document) Declared() []string {
	var out []string
	aws, _ := d["_aws"].(map[string]any)
	dirs, _ := aws["CloudWatchMetrics"].([]any)
	for _, x := range dirs {
		dir, _ := x.(map[string]any)
		ms, _ := dir["Metrics"].([]any)
		for _, m := range ms {
			def, _ := m.(map[string]any)
			if n, ok := def["Name"].(string); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// Namespace returns the namespace of the document's first directive.
func (d Document) Namespace() string {
	aws, _ := d["_aws"].(map[string]any)
	dirs, _ := aws["CloudWatchMetrics"].([]any)
	if len(dirs) == 0 {
		return ""
	}
	dir, _ := dirs[0].(map[string]any)
	ns, _ := dir["Namespace"].(string)
	return ns
}

// Number returns the numeric field name (ok false when absent).
func (d Document) Number(name string) (float64, bool) {
	n, ok := d[name].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}
