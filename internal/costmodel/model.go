package costmodel

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Invocation is what one function invocation (one HTTP request through
// API Gateway) consumed.
type Invocation struct {
	Function string
	// MemoryMB is the function's configured memory (template.yaml).
	MemoryMB int
	// BilledMs is the billed duration (whole milliseconds, BilledMs).
	BilledMs int
	// CPUMs is the CPU time the invocation used on the measuring machine
	// (an upper bound: the whole measuring process's).
	CPUMs float64
	// RequestBytes and ResponseBytes are the HTTP bodies as sent.
	RequestBytes, ResponseBytes int
	// DynamoCalls counts DynamoDB requests; RRU and WRU are the request
	// units they consume by the AWS rules.
	DynamoCalls int
	RRU, WRU    float64
	// StoreRRU and StoreWRU are the store's own estimate (for
	// comparison; the price uses RRU and WRU).
	StoreRRU, StoreWRU float64
	// LogBytes and LogEvents are the function's log output.
	LogBytes, LogEvents int
	// PlatformLogBytes and PlatformLogEvents are the lines Lambda itself
	// writes to the function's log group for the invocation (PlatformLog).
	PlatformLogBytes, PlatformLogEvents int
}

// FullVCPUMB is the memory at which a Lambda function gets one whole
// vCPU; below it, a function gets memoryMB/FullVCPUMB of one (CPU is
// allocated in proportion to memory).
const FullVCPUMB = 1769

// BilledMs is the billed duration of an invocation that took wallMs on
// the measuring machine, cpuMs of it on a CPU, when it runs with
// memoryMB: the time off the CPU (waiting on DynamoDB, S3) as measured,
// the CPU time stretched by the share of a vCPU the memory buys, rounded
// up to the millisecond. So a smaller memory is priced with the longer
// duration it causes, not only its lower rate.
func BilledMs(wallMs, cpuMs float64, memoryMB int) int {
	waiting := max(0, wallMs-cpuMs)
	stretch := max(1, float64(FullVCPUMB)/float64(memoryMB))
	return int(math.Ceil(waiting + cpuMs*stretch))
}

// PlatformLog returns the size and count of the log events the Lambda
// platform writes for one warm invocation in the Text log format (the
// template sets no LoggingConfig): START, END and REPORT, each naming the
// 36-character invocation id, REPORT with the duration, the billed
// duration, the memory size and the memory used. version is the function
// version invoked (the live alias points at a numbered one), maxUsedMB
// the memory used.
func PlatformLog(durationMs float64, billedMs, memoryMB, maxUsedMB int, version string) (bytes, events int) {
	id := "00000000-0000-0000-0000-000000000000" // every invocation id has this length
	lines := []string{
		fmt.Sprintf("START RequestId: %s Version: %s\n", id, version),
		fmt.Sprintf("END RequestId: %s\n", id),
		fmt.Sprintf("REPORT RequestId: %s\tDuration: %.2f ms\tBilled Duration: %d ms\tMemory Size: %d MB\tMax Memory Used: %d MB\t\n", id, durationMs, billedMs, memoryMB, maxUsedMB),
	}
	for _, l := range lines {
		bytes += len(l)
	}
	return bytes, len(lines)
}

// PlatformLogged reports whether Lambda writes the START, END and REPORT
// events of a successful invocation to the functions' log groups under
// the SAM template at path: yes in the Text log format (no LoggingConfig)
// and with a SystemLogLevel of INFO or DEBUG; no at WARN. The level is
// the Globals value, a literal or the Default of the parameter it
// references.
func PlatformLogged(path string) (bool, error) {
	t, err := readTemplate(path)
	if err != nil {
		return false, err
	}
	lc := t.Globals.Function.LoggingConfig
	if lc == nil || lc.LogFormat != "JSON" {
		return true, nil
	}
	level, err := t.value(lc.SystemLogLevel)
	if err != nil {
		return false, err
	}
	switch level {
	case "", "INFO", "DEBUG": // INFO is Lambda's default
		return true, nil
	case "WARN":
		return false, nil
	}
	return false, fmt.Errorf("costmodel: SystemLogLevel %q", level)
}

// samTemplate is what the cost model reads of a SAM template.
type samTemplate struct {
	Parameters map[string]struct {
		Default string `yaml:"Default"`
	} `yaml:"Parameters"`
	Globals struct {
		Function samFunction `yaml:"Function"`
	} `yaml:"Globals"`
	Resources map[string]struct {
		Type       string      `yaml:"Type"`
		Properties samFunction `yaml:"Properties"`
	} `yaml:"Resources"`
}

// samFunction is a function's properties (or the Globals') that price it.
type samFunction struct {
	MemorySize    yaml.Node `yaml:"MemorySize"`
	LoggingConfig *struct {
		LogFormat      string    `yaml:"LogFormat"`
		SystemLogLevel yaml.Node `yaml:"SystemLogLevel"`
	} `yaml:"LoggingConfig"`
}

func readTemplate(path string) (*samTemplate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("costmodel: template: %w", err)
	}
	var t samTemplate
	if err := yaml.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("costmodel: template %s: %w", path, err)
	}
	return &t, nil
}

// value is a scalar property: a literal, or the Default of the parameter
// it references (!Ref).
func (t *samTemplate) value(n yaml.Node) (string, error) {
	if n.Tag != "!Ref" {
		return n.Value, nil
	}
	p, ok := t.Parameters[n.Value]
	if !ok {
		return "", fmt.Errorf("costmodel: template references %q, not a parameter", n.Value)
	}
	return p.Default, nil
}

// Breakdown is the price of some invocations, per service.
type Breakdown struct {
	Lambda, API, Dynamo, Logs float64
}

// Total is the sum of the services.
func (b Breakdown) Total() float64 { return b.Lambda + b.API + b.Dynamo + b.Logs }

// Price prices one invocation.
func (p Prices) Price(in Invocation) Breakdown {
	gbs := float64(in.MemoryMB) / 1024 * float64(in.BilledMs) / 1000
	chunks := max(1, (in.RequestBytes+p.APIRequestChunk-1)/p.APIRequestChunk)
	return Breakdown{
		Lambda: p.LambdaRequest + gbs*p.LambdaGBSecond,
		API:    float64(chunks) * p.APIRequest,
		Dynamo: in.RRU*p.DynamoRRU + in.WRU*p.DynamoWRU,
		Logs: float64(in.LogBytes+in.PlatformLogBytes+(in.LogEvents+in.PlatformLogEvents)*p.LogEventOverhead) /
			(1 << 30) * p.LogsIngestedPerGB,
	}
}

// Operation is a named sequence of invocations (one operation of a client
// may take several requests).
type Operation struct {
	Name        string
	Invocations []Invocation
}

// Price is the price of the whole operation.
func (p Prices) PriceOp(op Operation) Breakdown {
	var t Breakdown
	for _, in := range op.Invocations {
		b := p.Price(in)
		t.Lambda += b.Lambda
		t.API += b.API
		t.Dynamo += b.Dynamo
		t.Logs += b.Logs
	}
	return t
}

// WriteTable writes op's table: one row per invocation, then the total
// per million operations.
func (p Prices) WriteTable(w io.Writer, op Operation) {
	fmt.Fprintf(w, "\n%s\n", op.Name)
	fmt.Fprintf(w, "  %-8s %6s %6s %7s %9s %9s %5s %8s %8s %13s %8s %8s\n", "function", "MB", "ms", "cpu ms", "req B", "resp B", "ddb", "RRU", "WRU", "store est R/W", "log B", "sys B")
	for _, in := range op.Invocations {
		fmt.Fprintf(w, "  %-8s %6d %6d %7.2f %9d %9d %5d %8.1f %8.1f %6.1f/%6.1f %8d %8d\n", in.Function, in.MemoryMB, in.BilledMs, in.CPUMs, in.RequestBytes, in.ResponseBytes, in.DynamoCalls, in.RRU, in.WRU, in.StoreRRU, in.StoreWRU, in.LogBytes, in.PlatformLogBytes)
	}
	b := p.PriceOp(op)
	fmt.Fprintf(w, "  per million: lambda $%.2f  api $%.2f  dynamodb $%.2f  logs $%.2f  total $%.2f\n", b.Lambda*1e6, b.API*1e6, b.Dynamo*1e6, b.Logs*1e6, b.Total()*1e6)
}

// ComparisonRow is one operation of the table against AppSync in
// docs/OPERATIONS.md, in USD per million operations: the services'
// shares, the request units and log bytes of one operation, and what
// AppSync charges for its requests alone (one query or mutation per
// request, before its data source).
type ComparisonRow struct {
	Name                             string
	Lambda, API, Dynamo, Logs, Total float64
	RRU, WRU                         float64
	LogBytes                         int
	AppSync                          float64
}

// Comparison is the row of op.
func (p Prices) Comparison(op Operation) ComparisonRow {
	b := p.PriceOp(op)
	r := ComparisonRow{Name: op.Name, Lambda: b.Lambda * 1e6, API: b.API * 1e6, Dynamo: b.Dynamo * 1e6, Logs: b.Logs * 1e6, Total: b.Total() * 1e6,
		AppSync: float64(len(op.Invocations)) * p.AppSyncQuery * 1e6}
	for _, in := range op.Invocations {
		r.RRU += in.RRU
		r.WRU += in.WRU
		r.LogBytes += in.LogBytes + in.PlatformLogBytes
	}
	return r
}

// Markdown is the row as docs/OPERATIONS.md's table writes it (cents;
// request units to the tenth).
func (r ComparisonRow) Markdown() string {
	return fmt.Sprintf("| `%s` | $%.2f | $%.2f | $%.2f (%.1f / %.1f) | $%.2f (%d B) | **$%.2f** | ≥ $%.2f |",
		r.Name, r.Lambda, r.API, r.Dynamo, r.RRU, r.WRU, r.Logs, r.LogBytes, r.Total, r.AppSync)
}

// ComparisonHeader is the table's header (two lines).
const ComparisonHeader = "| Per million operations | Lambda | API Gateway | DynamoDB (RRU / WRU each) | Logs (bytes each) | Total | AppSync (requests only) |\n|---|---|---|---|---|---|---|"

// ParseComparisonRow reads a row Markdown wrote.
func ParseComparisonRow(line string) (ComparisonRow, error) {
	var r ComparisonRow
	_, err := fmt.Sscanf(strings.ReplaceAll(line, "`", ""), "| %s | $%f | $%f | $%f (%f / %f) | $%f (%d B) | **$%f** | ≥ $%f |",
		&r.Name, &r.Lambda, &r.API, &r.Dynamo, &r.RRU, &r.WRU, &r.Logs, &r.LogBytes, &r.Total, &r.AppSync)
	if err != nil {
		return r, fmt.Errorf("costmodel: comparison row %q: %w", line, err)
	}
	return r, nil
}

// AppSyncIdle is AppSync's month for sockets idle connections: connection
// minutes only.
func (p Prices) AppSyncIdle(sockets int) float64 {
	return float64(sockets) * HoursPerMonth * 60 * p.AppSyncConnMinute
}

// RealtimeIdle is the monthly price of the realtime tier holding idle
// sockets on the configuration and traffic docs/REALTIME.md measures: two
// Fargate tasks (0.25 vCPU, 1 GB, ARM), an NLB, four public IPv4
// addresses (two NLB, two tasks), the tier's registry and logs ($0.30 of
// DynamoDB, one custom metric, 1.8 GB of connect/close lines), with
// hourly reconnects. tlsListener: the NLB ends TLS (NLCU per 3,000 active
// TLS connections, 0.52 GB/h per 10,000 sockets); otherwise the tasks end
// it behind a TCP listener (the recommended shape: NLCU per 100,000
// connections or 0.596 GB/h per 10,000 sockets, plus the certificate's
// secret read hourly by each task).
func (p Prices) RealtimeIdle(sockets int, tlsListener bool) float64 {
	h := float64(HoursPerMonth)
	n := float64(sockets)
	tasks := 2.0
	total := p.NLBHour*h +
		tasks*(0.25*p.FargateVCPUH+1*p.FargateGBH)*h +
		4*p.PublicIPv4H*h +
		(262_800*p.DynamoWRU + 1_051_200*p.DynamoRRU) +
		p.CustomMetricM + 1.8*p.LogsIngestedPerGB
	if tlsListener {
		return total + math.Max(n/3000, 0.52*n/10_000)*p.NLCUHour*h
	}
	return total + math.Max(n/100_000, 0.596*n/10_000)*p.NLCUHour*h +
		p.SecretMonth + 1_500*p.SecretCall
}

// FunctionMemory reads each function's MemorySize from a SAM template:
// the Globals value, overridden in a function's Properties, a literal or
// the Default of the parameter it references (!Ref). Keys are the
// resource names (PushFunction, PullFunction, ...).
func FunctionMemory(path string) (map[string]int, error) {
	t, err := readTemplate(path)
	if err != nil {
		return nil, err
	}
	megabytes := func(n yaml.Node) (int, error) {
		v, err := t.value(n)
		if err != nil {
			return 0, err
		}
		m, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("costmodel: template MemorySize %q: %w", v, err)
		}
		return m, nil
	}
	if t.Globals.Function.MemorySize.Value == "" {
		return nil, fmt.Errorf("costmodel: %s has no Globals MemorySize", path)
	}
	global, err := megabytes(t.Globals.Function.MemorySize)
	if err != nil {
		return nil, err
	}
	mem := map[string]int{}
	for id, r := range t.Resources {
		if r.Type != "AWS::Serverless::Function" {
			continue
		}
		mem[id] = global
		if r.Properties.MemorySize.Value != "" {
			if mem[id], err = megabytes(r.Properties.MemorySize); err != nil {
				return nil, fmt.Errorf("%s: %w", id, err)
			}
		}
	}
	return mem, nil
}
