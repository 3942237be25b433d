package costmodel_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/costmodel"
)

// One invocation priced by hand from the published us-east-1 prices:
// Lambda $0.20 per million requests and $0.0000133334 per GB-second on
// arm64, an HTTP API request $1.00 per million (per 512 KB), DynamoDB
// on-demand $0.625 per million write and $0.125 per million read units,
// CloudWatch Logs $0.50 per GB ingested with 26 bytes of event overhead.
func TestPrice(t *testing.T) {
	in := costmodel.Invocation{MemoryMB: 512, BilledMs: 200, RequestBytes: 600 << 10, RRU: 4, WRU: 10, LogBytes: 1000, LogEvents: 2}
	b := costmodel.USEast1.Price(in)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*1e-9 {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	near("lambda", b.Lambda, 0.20e-6+0.5*0.2*0.0000133334)
	near("api (600 KB: two requests)", b.API, 2e-6)
	near("dynamodb", b.Dynamo, 4*0.125e-6+10*0.625e-6)
	near("logs", b.Logs, 1052.0/(1<<30)*0.50)
	in.PlatformLogBytes, in.PlatformLogEvents = 300, 3
	near("logs with Lambda's lines", costmodel.USEast1.Price(in).Logs, (1052.0+300+3*26)/(1<<30)*0.50)
}

// Lambda's lines for a warm invocation, as the Text log format writes
// them (docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html):
// START, END and REPORT around an invocation id of 36 characters.
func TestPlatformLog(t *testing.T) {
	lines := "START RequestId: c793869b-ee49-115b-a5b6-4fd21e8dedac Version: 12\n" +
		"END RequestId: c793869b-ee49-115b-a5b6-4fd21e8dedac\n" +
		"REPORT RequestId: c793869b-ee49-115b-a5b6-4fd21e8dedac\tDuration: 2.23 ms\tBilled Duration: 3 ms\tMemory Size: 1024 MB\tMax Memory Used: 38 MB\t\n"
	if n, events := costmodel.PlatformLog(2.23, 3, 1024, 38, "12"); n != len(lines) || events != 3 {
		t.Errorf("%d bytes in %d events, want %d in 3", n, events, len(lines))
	}
}

// The realtime tier's idle month agrees with docs/REALTIME.md's table
// for 10,000 sockets: $52.58 with TLS in the tasks, $64.16 on the TLS
// listener (its lines are rounded to the cent).
func TestRealtimeIdle(t *testing.T) {
	for _, c := range []struct {
		listener bool
		want     float64
	}{{false, 52.58}, {true, 64.16}} {
		if got := costmodel.USEast1.RealtimeIdle(10_000, c.listener); math.Abs(got-c.want) > 0.05 {
			t.Errorf("10,000 idle sockets, TLS listener %t: $%.2f a month, docs/REALTIME.md says $%.2f", c.listener, got, c.want)
		}
	}
}

// Each function's memory is what template.yaml configures: the Globals
// value unless the function sets its own.
func TestFunctionMemory(t *testing.T) {
	mem, err := costmodel.FunctionMemory(filepath.Join(repoRoot(), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for fn, want := range map[string]int{"PushFunction": 1024, "PullFunction": 512, "SegmentFunction": 512, "BlobFunction": 512} {
		if mem[fn] != want {
			t.Errorf("%s: %d MB, want %d", fn, mem[fn], want)
		}
	}
}

// Lambda's own lines of a successful invocation reach the log group in
// the Text format and at SystemLogLevel INFO, not at WARN; the template's
// level comes from the parameter it references.
func TestPlatformLogged(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		yaml string
		want bool
	}{
		"text":    {"Globals:\n  Function:\n    MemorySize: 512\n", true},
		"info":    {"Globals:\n  Function:\n    LoggingConfig:\n      LogFormat: JSON\n      SystemLogLevel: INFO\n", true},
		"warn":    {"Globals:\n  Function:\n    LoggingConfig:\n      LogFormat: JSON\n      SystemLogLevel: WARN\n", false},
		"default": {"Globals:\n  Function:\n    LoggingConfig:\n      LogFormat: JSON\n", true},
		"ref":     {"Parameters:\n  L:\n    Type: String\n    Default: WARN\nGlobals:\n  Function:\n    LoggingConfig:\n      LogFormat: JSON\n      SystemLogLevel: !Ref L\n", false},
	} {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := costmodel.PlatformLogged(path); err != nil || got != c.want {
			t.Errorf("%s: %t, %v; want %t", name, got, err, c.want)
		}
	}
	if got, err := costmodel.PlatformLogged(filepath.Join(repoRoot(), "template.yaml")); err != nil || got {
		t.Errorf("template.yaml: platform lines logged %t (%v); its default LambdaSystemLogLevel is WARN", got, err)
	}
}

// Below 1,769 MB Lambda gives a function that share of one vCPU, so the
// CPU part of a duration stretches and the waiting part does not: 10 ms
// of which 2 on a CPU is 8 + 2×1769/1024 = 11.46 (12 billed) at 1,024 MB,
// 8 + 2×1769/256 = 21.82 (22) at 256 MB, and 10 at 1,769 MB and above.
func TestBilledMs(t *testing.T) {
	for _, c := range []struct {
		wall, cpu float64
		mem, want int
	}{{10, 2, 1024, 12}, {10, 2, 256, 22}, {10, 2, 1769, 10}, {10, 2, 3008, 10}, {1, 3, 1769, 3}, {0.2, 0, 512, 1}} {
		if got := costmodel.BilledMs(c.wall, c.cpu, c.mem); got != c.want {
			t.Errorf("BilledMs(%v, %v, %d) = %d, want %d", c.wall, c.cpu, c.mem, got, c.want)
		}
	}
}
