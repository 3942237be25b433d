package functions

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The stated target of the capacity defaults (issue 20): 10,000 tenants
// writing 1,000 times a second in total, each write a one-operation push
// round (POST /sync: push + pull). The pull side is the model
// docs/SCALE.md ("Capacity for the target") states: every write wakes two
// other devices of its tenant, which pull it once each, and every tenant
// makes one catch-up pull (reconnect, app resumed) per 10 s.
const (
	targetWritesPerSecond  = 1000
	targetTenants          = 10000
	wakeUpPullsPerWrite    = 2
	catchUpPullIntervalSec = 10
	// API Gateway's default regional quotas per account (all APIs): a
	// stage default above them never applies without a quota increase.
	accountRateQuota  = 10000
	accountBurstQuota = 5000
)

// opUnits is one row of docs/OPERATIONS.md's "Cost" table: the read and
// write request units `make cost` counted for one operation.
type opUnits struct{ read, write float64 }

func costTableUnits(t *testing.T) map[string]opUnits {
	t.Helper()
	b, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)`[^|]*\\|[^|]*\\|[^|]*\\| \\$[0-9.,]+ \\(([0-9.]+) / ([0-9.]+)\\)")
	out := map[string]opUnits{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		r, _ := strconv.ParseFloat(m[2], 64)
		w, _ := strconv.ParseFloat(m[3], 64)
		out[m[1]] = opUnits{r, w}
	}
	for _, op := range []string{"push-round-1op", "quiet-pull", "incremental-pull-100"} {
		if _, ok := out[op]; !ok {
			t.Fatalf("docs/OPERATIONS.md's Cost table has no units for %s", op)
		}
	}
	return out
}

// wakeUpPullReadUnits is what docs/SCALE.md measured for an incremental
// pull that finds one new commit of its scopes.
func wakeUpPullReadUnits(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("../docs/SCALE.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`1 of 1,001 commits: \d+ round\s+trips and (\d+) RCU`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("docs/SCALE.md no longer states the read units of a one-commit incremental pull")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func paramDefault(t *testing.T, root *yaml.Node, name string) float64 {
	t.Helper()
	n := get(root, "Parameters", name)
	if n == nil {
		t.Fatalf("the template has no parameter %s", name)
	}
	if scalar(get(n, "Type")) != "Number" {
		t.Fatalf("parameter %s is not a Number", name)
	}
	v, err := strconv.ParseFloat(scalar(get(n, "Default")), 64)
	if err != nil {
		t.Fatalf("parameter %s: default %q: %v", name, scalar(get(n, "Default")), err)
	}
	return v
}

func targetRequestsPerSecond() float64 {
	return targetWritesPerSecond*(1+wakeUpPullsPerWrite) + float64(targetTenants)/catchUpPullIntervalSec
}

// The HTTP API's default route throttle comes from parameters whose
// defaults carry the target's requests (push rounds and the pulls they
// cause) within the account's regional quotas.
func TestTemplateThrottlesSizedForTarget(t *testing.T) {
	// TestTemplateOperations checks that the route takes these parameters.
	root := loadYAML(t)
	rate := paramDefault(t, root, "ApiThrottlingRateLimit")
	burst := paramDefault(t, root, "ApiThrottlingBurstLimit")
	need := targetRequestsPerSecond()
	if rate < need {
		t.Errorf("ApiThrottlingRateLimit defaults to %.0f requests/s; the target needs %.0f", rate, need)
	}
	if rate > accountRateQuota {
		t.Errorf("ApiThrottlingRateLimit %.0f exceeds the account's regional quota %d", rate, accountRateQuota)
	}
	// The burst absorbs a second's swing above the steady rate: at least
	// the target's one-second volume, at most what the account allows.
	if burst < need || burst > accountBurstQuota {
		t.Errorf("ApiThrottlingBurstLimit defaults to %.0f; want between %.0f and %d", burst, need, accountBurstQuota)
	}
	// 0 stops traffic at the edge (docs/OPERATIONS.md); the parameters must allow it.
	for _, p := range []string{"ApiThrottlingRateLimit", "ApiThrottlingBurstLimit"} {
		if scalar(get(root, "Parameters", p, "MinValue")) != "0" {
			t.Errorf("%s: MinValue must be 0", p)
		}
	}
}

// The table's warm throughput is set from parameters whose defaults carry
// the target from the first second, in make cost's units per operation;
// both 0 leaves DynamoDB's defaults; one without the other is refused.
func TestTemplateWarmThroughput(t *testing.T) {
	root := loadYAML(t)
	units := costTableUnits(t)
	push, quiet, incr := units["push-round-1op"], units["quiet-pull"], units["incremental-pull-100"]
	wakeUps := float64(targetWritesPerSecond * wakeUpPullsPerWrite)
	catchUps := float64(targetTenants) / catchUpPullIntervalSec
	needRead := targetWritesPerSecond*push.read + wakeUps*wakeUpPullReadUnits(t) + catchUps*quiet.read
	// A pull writes at most what incremental-pull-100 wrote (its cursor).
	needWrite := targetWritesPerSecond*push.write + wakeUps*incr.write + catchUps*quiet.write

	e := newCfnEval(t, root, nil)
	warm, ok := tableProperty(e, "WarmThroughput").(map[string]any)
	if !ok {
		t.Fatalf("SyncTable has no WarmThroughput by default: %v", tableProperty(e, "WarmThroughput"))
	}
	for key, need := range map[string]float64{"ReadUnitsPerSecond": needRead, "WriteUnitsPerSecond": needWrite} {
		s, _ := warm[key].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Errorf("WarmThroughput.%s = %v, want a number", key, warm[key])
			continue
		}
		if v < need {
			t.Errorf("WarmThroughput.%s defaults to %.0f; the target needs %.0f", key, v, need)
		}
	}
	// The values are the parameters' (overridable), not literals.
	over := newCfnEval(t, root, map[string]string{"TableWarmReadUnitsPerSecond": "50000", "TableWarmWriteUnitsPerSecond": "30000"})
	if got := tableProperty(over, "WarmThroughput"); !sameValue(got, map[string]any{"ReadUnitsPerSecond": "50000", "WriteUnitsPerSecond": "30000"}) {
		t.Errorf("WarmThroughput with the parameters at 50000/30000 = %v", got)
	}

	off := newCfnEval(t, root, map[string]string{"TableWarmReadUnitsPerSecond": "0", "TableWarmWriteUnitsPerSecond": "0"})
	if v := tableProperty(off, "WarmThroughput"); v != noValue {
		t.Errorf("both warm parameters 0: want no WarmThroughput, got %v", v)
	}
	rule := get(root, "Rules", "WarmThroughputPair", "Assertions").Content[0]
	for _, c := range []struct {
		read, write string
		ok          bool
	}{{"0", "0", true}, {"24000", "15000", true}, {"0", "15000", false}, {"24000", "0", false}} {
		ev := newCfnEval(t, root, map[string]string{"TableWarmReadUnitsPerSecond": c.read, "TableWarmWriteUnitsPerSecond": c.write})
		if got := ev.boolean(get(rule, "Assert")); got != c.ok {
			t.Errorf("read %s, write %s: the rule accepts = %v, want %v", c.read, c.write, got, c.ok)
		}
	}
}

// On-demand spend caps are parameters, off by default (-1); each cap is
// set alone or together, and the docs say what a cap does.
func TestTemplateSpendCaps(t *testing.T) {
	root := loadYAML(t)
	for _, p := range []string{"TableMaxReadRequestUnits", "TableMaxWriteRequestUnits"} {
		if d := paramDefault(t, root, p); d != -1 {
			t.Errorf("%s defaults to %v; want -1 (no cap)", p, d)
		}
	}
	cases := []struct {
		read, write string
		want        any
	}{
		{"-1", "-1", noValue},
		{"-1", "20000", map[string]any{"MaxWriteRequestUnits": "20000"}},
		{"40000", "-1", map[string]any{"MaxReadRequestUnits": "40000"}},
		{"40000", "20000", map[string]any{"MaxReadRequestUnits": "40000", "MaxWriteRequestUnits": "20000"}},
	}
	for _, c := range cases {
		e := newCfnEval(t, root, map[string]string{"TableMaxReadRequestUnits": c.read, "TableMaxWriteRequestUnits": c.write})
		got := tableProperty(e, "OnDemandThroughput")
		if !sameValue(got, c.want) {
			t.Errorf("caps read %s, write %s: OnDemandThroughput = %v, want %v", c.read, c.write, got, c.want)
		}
	}
	b, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, s := range []string{"TableMaxReadRequestUnits", "TableMaxWriteRequestUnits", "sync.rate_limited"} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/OPERATIONS.md does not mention %s (what a spend cap does)", s)
		}
	}
}

// tableProperty is SyncTable's evaluated property, noValue when absent.
func tableProperty(e *cfnEval, name string) any {
	if get(e.root, "Resources", "SyncTable", "Properties", name) == nil {
		return noValue
	}
	return e.property("SyncTable", name)
}

func sameValue(a, b any) bool {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok != bok {
		return false
	}
	if !aok {
		return a == b
	}
	if len(am) != len(bm) {
		return false
	}
	for k, v := range am {
		if !sameValue(v, bm[k]) {
			return false
		}
	}
	return true
}

// Two stacks of this template in one account and region must not collide
// on a schedule or rule name. SAM names a ScheduleV2 schedule
// <function><event> unless OmitName is set (then CloudFormation generates
// a unique name); an explicit Name must contain the stack name.
func TestTemplateScheduleNamesUnique(t *testing.T) {
	root := loadYAML(t)
	res := get(root, "Resources")
	unique := func(at string, name *yaml.Node) {
		if name == nil {
			return
		}
		if name.Tag != "!Sub" || !strings.Contains(name.Value, "${AWS::StackName}") {
			t.Errorf("%s: Name %q is the same in every stack; omit it or include ${AWS::StackName}", at, name.Value)
		}
	}
	seen := 0
	for _, id := range keys(res) {
		switch scalar(get(res, id, "Type")) {
		case "AWS::Scheduler::Schedule", "AWS::Scheduler::ScheduleGroup", "AWS::Events::Rule":
			seen++
			unique(id, get(res, id, "Properties", "Name"))
		case "AWS::Serverless::Function":
			events := get(res, id, "Properties", "Events")
			for _, ev := range keys(events) {
				props := get(events, ev, "Properties")
				at := id + ".Events." + ev
				switch scalar(get(events, ev, "Type")) {
				case "ScheduleV2":
					seen++
					if name := get(props, "Name"); name != nil {
						unique(at, name)
					} else if scalar(get(props, "OmitName")) != "true" {
						t.Errorf("%s: without OmitName: true SAM names the schedule %s%s in every stack", at, id, ev)
					}
				case "Schedule", "EventBridgeRule", "CloudWatchEvent":
					seen++
					unique(at, get(props, "Name"))
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no schedule found: PruneFunction's schedule is expected")
	}
}
