package functions

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/metrics"
)

// metricRef is one metric an alarm or the dashboard reads.
type metricRef struct {
	ours       bool // namespace is !Ref MetricsNamespace
	namespace  string
	name       string
	dimensions map[string]string
	at         string
}

func alarmMetrics(t *testing.T, root *yaml.Node, id string) []metricRef {
	t.Helper()
	p := get(root, "Resources", id, "Properties")
	read := func(m *yaml.Node, at string) metricRef {
		ns := get(m, "Namespace")
		r := metricRef{ours: refTo(ns, "MetricsNamespace"), namespace: scalar(ns), name: scalar(get(m, "MetricName")), dimensions: map[string]string{}, at: at}
		if ds := get(m, "Dimensions"); ds != nil {
			for _, d := range ds.Content {
				r.dimensions[scalar(get(d, "Name"))] = scalar(get(d, "Value"))
			}
		}
		return r
	}
	if get(p, "MetricName") != nil {
		return []metricRef{read(p, id)}
	}
	var out []metricRef
	ms := get(p, "Metrics")
	if ms == nil {
		t.Fatalf("%s: neither MetricName nor Metrics", id)
	}
	for _, m := range ms.Content {
		if stat := get(m, "MetricStat", "Metric"); stat != nil {
			out = append(out, read(stat, id+"/"+scalar(get(m, "Id"))))
		}
	}
	return out
}

func functionNames() []string {
	var out []string
	for _, f := range append(slices.Clone(app.Functions), app.Jobs...) {
		out = append(out, f.Name)
	}
	return out
}

// checkOurs: a metric of the functions' namespace is a catalogue entry,
// read with one of the dimension sets the code emits it with, for a
// function that exists.
func checkOurs(t *testing.T, r metricRef) {
	t.Helper()
	m, ok := metrics.Lookup(r.name)
	if !ok {
		t.Errorf("%s: metric %q is not in internal/metrics' catalogue (the code never emits it)", r.at, r.name)
		return
	}
	var names []string
	for k := range r.dimensions {
		names = append(names, k)
	}
	found := false
	for _, set := range m.Dimensions {
		if s := slices.Sorted(slices.Values(set)); slices.Equal(s, slices.Sorted(slices.Values(names))) {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: %s with dimensions %v; the code emits it with %v", r.at, r.name, names, m.Dimensions)
	}
	if fn, ok := r.dimensions[metrics.DimFunction]; ok && !slices.Contains(functionNames(), fn) && fn != metrics.FunctionGateway && fn != tierFunction {
		t.Errorf("%s: %s of unknown function %q", r.at, r.name, fn)
	}
}

// Every alarm on the functions' own metrics names a catalogue metric (one
// source of truth with the EMF the code writes), every alarm notifies the
// topic parameter, and the alarms the operations guide lists exist.
func TestTemplateAlarmsUseCatalogue(t *testing.T) {
	root := loadYAML(t)
	ids := resourcesOfType(root, "AWS::CloudWatch::Alarm")
	if len(ids) < 10 {
		t.Fatalf("only %d alarms", len(ids))
	}
	watched := map[string]bool{} // "namespace/metric" (ours: "ours/metric")
	for _, id := range ids {
		p := get(root, "Resources", id, "Properties")
		for _, k := range []string{"AlarmActions", "OKActions"} {
			a := get(p, k)
			if a == nil || a.Tag != "!If" || a.Content[0].Value != "HasAlarmTopic" || !refTo(a.Content[1].Content[0], "AlarmTopicArn") {
				t.Errorf("%s: %s must be !If [HasAlarmTopic, [!Ref AlarmTopicArn], ...]", id, k)
			}
		}
		if !strings.Contains(scalar(get(p, "AlarmDescription")), "OPERATIONS.md") {
			t.Errorf("%s: the description should point at the runbook", id)
		}
		for _, r := range alarmMetrics(t, root, id) {
			if r.ours {
				checkOurs(t, r)
				watched["ours/"+r.name] = true
				continue
			}
			if !strings.HasPrefix(r.namespace, "AWS/") {
				t.Errorf("%s: namespace %q is neither AWS/ nor !Ref MetricsNamespace", r.at, r.namespace)
			}
			watched[r.namespace+"/"+r.name] = true
		}
	}
	for _, want := range []string{
		"ours/serverErrors", "ours/ms", "ours/rateLimited", "ours/softTimeouts", "ours/pruneFailures", "ours/requestsOverCap",
		"AWS/ApiGateway/5xx", "AWS/Lambda/Throttles", "AWS/Lambda/Errors", "AWS/Lambda/ConcurrentExecutions",
		"AWS/DynamoDB/ThrottledRequests", "AWS/DynamoDB/SystemErrors",
	} {
		if !watched[want] {
			t.Errorf("no alarm on %s", want)
		}
	}
	// Throttles: one alarm per function. Not the post-traffic hook: its
	// reserved concurrency of 1 throttles the deployment groups' parallel
	// invocations by design (Lambda retries them).
	for _, f := range append(slices.Clone(app.Functions), app.Jobs...) {
		if f.LogicalID == app.MigrateHookJob.LogicalID {
			continue
		}
		found := false
		for _, id := range ids {
			for _, r := range alarmMetrics(t, root, id) {
				if r.namespace == "AWS/Lambda" && r.name == "Throttles" && get(get(root, "Resources", id, "Properties", "Dimensions").Content[0], "Value").Value == f.LogicalID {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("no Throttles alarm for %s", f.LogicalID)
		}
	}
}

var dashVar = regexp.MustCompile(`\$\{([^}]+)\}`)

// The dashboard's metrics of the functions' namespace are catalogue
// metrics too, and its body is valid JSON.
func TestTemplateDashboard(t *testing.T) {
	root := loadYAML(t)
	body := get(root, "Resources", "Dashboard", "Properties", "DashboardBody")
	if body == nil || body.Tag != "!Sub" || body.Kind != yaml.SequenceNode {
		t.Fatal("Dashboard.DashboardBody must be !Sub [body, vars]")
	}
	for _, m := range dashVar.FindAllStringSubmatch(body.Content[0].Value, -1) {
		name := m[1]
		if !strings.HasPrefix(name, "AWS::") && get(root, "Parameters", name) == nil && get(root, "Resources", name) == nil && get(body.Content[1], name) == nil {
			t.Errorf("dashboard variable ${%s} resolves to nothing", name)
		}
	}
	src := dashVar.ReplaceAllStringFunc(body.Content[0].Value, func(v string) string {
		if v == "${MetricsNamespace}" {
			return "OURS"
		}
		return "x"
	})
	var doc struct {
		Widgets []struct {
			Properties struct {
				Metrics [][]any `json:"metrics"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("dashboard body is not JSON: %v", err)
	}
	n := 0
	for wi, w := range doc.Widgets {
		var prev []string
		for _, row := range w.Properties.Metrics {
			// CloudWatch's shorthand: "..." repeats the previous row's
			// leading fields, "." one field of it.
			var fields []string
			for i, x := range row {
				s, ok := x.(string)
				if !ok {
					break // rendering options
				}
				switch {
				case s == "..." && i == 0:
					fields = append(fields, prev[:len(prev)-(len(row)-1)+countOpts(row)]...)
				case s == "." && i < len(prev):
					fields = append(fields, prev[i])
				default:
					fields = append(fields, s)
				}
			}
			prev = fields
			if len(fields) < 2 || fields[0] != "OURS" {
				continue
			}
			n++
			r := metricRef{ours: true, name: fields[1], dimensions: map[string]string{}, at: "Dashboard widget " + string(rune('0'+wi))}
			for i := 2; i+1 < len(fields); i += 2 {
				r.dimensions[fields[i]] = fields[i+1]
			}
			checkOurs(t, r)
		}
	}
	if n < 20 {
		t.Errorf("only %d dashboard metrics of the functions' namespace", n)
	}
}

func countOpts(row []any) int {
	n := 0
	for _, x := range row {
		if _, ok := x.(string); !ok {
			n++
		}
	}
	return n
}

// Stage throttling and JSON access logs, reserved concurrency and
// deployment safety per function, the scheduled prune, table protection.
func TestTemplateOperations(t *testing.T) {
	root := loadYAML(t)
	api := get(root, "Resources", "SyncApi", "Properties")
	logs := get(api, "AccessLogSettings")
	if dst := get(logs, "DestinationArn"); dst == nil || dst.Tag != "!GetAtt" || !strings.HasPrefix(dst.Value, "ApiAccessLogGroup.") {
		t.Error("access logs must go to ApiAccessLogGroup")
	}
	if !refTo(get(root, "Resources", "ApiAccessLogGroup", "Properties", "RetentionInDays"), "LogRetentionDays") {
		t.Error("ApiAccessLogGroup needs RetentionInDays: !Ref LogRetentionDays")
	}
	var format map[string]string
	if err := json.Unmarshal([]byte(scalar(get(logs, "Format"))), &format); err != nil {
		t.Fatalf("access log format is not a JSON object: %v", err)
	}
	for k, v := range map[string]string{"requestId": "$context.requestId", "status": "$context.status", "responseLatency": "$context.responseLatency", "integrationError": "$context.integrationErrorMessage"} {
		if format[k] != v {
			t.Errorf("access log field %s = %q, want %q", k, format[k], v)
		}
	}
	rs := get(api, "DefaultRouteSettings")
	if !refTo(get(rs, "ThrottlingRateLimit"), "ApiThrottlingRateLimit") || !refTo(get(rs, "ThrottlingBurstLimit"), "ApiThrottlingBurstLimit") {
		t.Error("stage default throttling must come from the ApiThrottling* parameters")
	}

	g := get(root, "Globals", "Function")
	if scalar(get(g, "AutoPublishAlias")) == "" || !refTo(get(g, "Tracing"), "Tracing") {
		t.Error("Globals.Function needs AutoPublishAlias and Tracing: !Ref Tracing")
	}
	for _, f := range app.Functions {
		p := get(root, "Resources", f.LogicalID, "Properties")
		param := strings.TrimSuffix(f.LogicalID, "Function") + "ReservedConcurrency"
		rc := get(p, "ReservedConcurrentExecutions")
		if rc == nil || rc.Tag != "!If" || !refTo(rc.Content[1], param) || !refTo(rc.Content[2], "AWS::NoValue") {
			t.Errorf("%s: ReservedConcurrentExecutions must be !If [cond, !Ref %s, !Ref AWS::NoValue]", f.LogicalID, param)
		}
		dp := get(p, "DeploymentPreference")
		if !refTo(get(dp, "Type"), "DeploymentType") {
			t.Errorf("%s: DeploymentPreference.Type must be !Ref DeploymentType", f.LogicalID)
		}
		alarms := get(dp, "Alarms")
		rollback := f.LogicalID + "ServerErrorsAlarm"
		if alarms == nil || len(alarms.Content) == 0 || !refTo(alarms.Content[0], rollback) {
			t.Errorf("%s: DeploymentPreference must roll back on %s", f.LogicalID, rollback)
			continue
		}
		watches := false
		for _, r := range alarmMetrics(t, root, rollback) {
			if r.ours && r.name == metrics.ServerErrors.Name && r.dimensions[metrics.DimFunction] == f.Name {
				watches = true
			}
		}
		if !watches {
			t.Errorf("%s does not watch %s's serverErrors", rollback, f.Name)
		}
	}

	pr := get(root, "Resources", app.PruneJob.LogicalID, "Properties")
	if scalar(get(pr, "ReservedConcurrentExecutions")) != "1" {
		t.Error("PruneFunction: ReservedConcurrentExecutions 1 (runs never overlap)")
	}
	ev := get(pr, "Events", "Schedule")
	if scalar(get(ev, "Type")) != "ScheduleV2" || !refTo(get(ev, "Properties", "ScheduleExpression"), "PruneSchedule") {
		t.Error("PruneFunction: a ScheduleV2 event with ScheduleExpression: !Ref PruneSchedule")
	}
	// The schedule's input sets how many registry shards a run walks at
	// once; app.PruneEvent reads it as "parallel".
	if in := get(ev, "Properties", "Input"); in == nil || in.Tag != "!Sub" || in.Value != `{"parallel": ${PruneParallel}}` {
		t.Error(`PruneFunction: schedule Input !Sub '{"parallel": ${PruneParallel}}'`)
	}
	// The table, plus the blob sweep that follows a finished pass: S3
	// access confined to the bucket's blobs/ prefix, nothing else.
	if pol := get(pr, "Policies"); pol == nil || len(pol.Content) != 2 || !tableItemStatement(pol.Content[0]) {
		t.Error("PruneFunction: item actions (no Scan) on the sync table plus the blob-sweep statement, nothing more")
	} else {
		for _, st := range get(pol.Content[1], "Statement").Content {
			res := get(st, "Resource")
			if res.Tag == "!Sub" && !strings.HasSuffix(res.Value, "/blobs/*") {
				t.Errorf("PruneFunction: S3 object access beyond blobs/: %s", res.Value)
			}
			if c := get(st, "Condition", "StringLike", "s3:prefix"); scalar(get(st, "Action")) == "s3:ListBucket" && (c == nil || len(c.Content) != 1 || c.Content[0].Value != "blobs/*") {
				t.Error("PruneFunction: ListBucket must be confined to the blobs/* prefix")
			}
		}
	}

	tb := get(root, "Resources", "SyncTable", "Properties")
	if !refTo(get(tb, "DeletionProtectionEnabled"), "TableDeletionProtection") {
		t.Error("SyncTable: DeletionProtectionEnabled: !Ref TableDeletionProtection")
	}
	if ci := get(tb, "ContributorInsightsSpecification"); ci == nil || ci.Tag != "!If" || ci.Content[0].Value != "ContributorInsightsOn" {
		t.Error("SyncTable: ContributorInsightsSpecification behind ContributorInsightsOn")
	}
	if scalar(get(root, "Parameters", "TableDeletionProtection", "Default")) != "true" {
		t.Error("deletion protection must default to on")
	}
}

// The deploy hook (rolling schema upgrades, issue 20): one hook per
// deploy, the post-traffic hook of the push function's deployment group,
// and no hook on any other group (a pre-traffic hook would hold traffic
// back and run once per group); the hook itself is not traffic-shifted,
// carries the name prefix the CodeDeploy role SAM creates may invoke,
// runs one at a time, and may only use the table and report a lifecycle
// status to this stack's deployment groups.
func TestTemplateMigrateHook(t *testing.T) {
	root := loadYAML(t)
	hook := app.MigrateHookJob.LogicalID
	for _, f := range app.Functions {
		hooks := get(root, "Resources", f.LogicalID, "Properties", "DeploymentPreference", "Hooks")
		if f.LogicalID == "PushFunction" {
			if !refTo(get(hooks, "PostTraffic"), hook) || len(keys(hooks)) != 1 {
				t.Errorf("%s: DeploymentPreference.Hooks must be exactly PostTraffic: !Ref %s", f.LogicalID, hook)
			}
		} else if hooks != nil {
			t.Errorf("%s: DeploymentPreference.Hooks %v: only PushFunction's group runs the hook", f.LogicalID, keys(hooks))
		}
	}
	p := get(root, "Resources", hook, "Properties")
	if p == nil {
		t.Fatalf("no %s", hook)
	}
	if get(p, "DeploymentPreference") != nil {
		t.Errorf("%s: a hook function must not have a DeploymentPreference", hook)
	}
	name := get(p, "FunctionName")
	if name == nil || name.Tag != "!Sub" || len(name.Content) != 2 || !strings.HasPrefix(name.Content[0].Value, "CodeDeployHook_") {
		t.Errorf("%s: FunctionName must start with CodeDeployHook_ (AWSCodeDeployRoleForLambda invokes only those)", hook)
	} else if fixed := strings.Split(name.Content[0].Value, "${")[0]; len(fixed)+36 > 64 {
		t.Errorf("%s: %q plus a stack UUID exceeds Lambda's 64-character name limit", hook, fixed)
	}
	if scalar(get(p, "ReservedConcurrentExecutions")) != "1" {
		t.Errorf("%s: ReservedConcurrentExecutions 1 (a retried or manual invocation runs after the running one)", hook)
	}
	if to := scalar(get(p, "Timeout")); to != "900" {
		t.Errorf("%s: Timeout %s, want 900 (the backfill runs within it)", hook, to)
	}
	pols := get(p, "Policies")
	if pols == nil || len(pols.Content) != 2 || !tableItemStatement(pols.Content[0]) {
		t.Fatalf("%s: Policies must be item actions (no Scan) on the sync table and one statement", hook)
	}
	sts := get(pols.Content[1], "Statement")
	if sts == nil || len(sts.Content) != 1 {
		t.Fatalf("%s: one statement", hook)
	}
	st := sts.Content[0]
	if a := scalar(get(st, "Action")); a != "codedeploy:PutLifecycleEventHookExecutionStatus" {
		t.Errorf("%s: action %q", hook, a)
	}
	res := get(st, "Resource")
	if res == nil || res.Tag != "!Sub" || !strings.Contains(res.Value, ":deploymentgroup:${ServerlessDeploymentApplication}/") {
		t.Errorf("%s: the status call must be scoped to this stack's CodeDeploy application's deployment groups", hook)
	}
	if !refTo(get(root, "Globals", "Function", "Environment", "Variables", "SYNC_CHECKPOINTS"), "BackfillCheckpoints") {
		t.Error("SYNC_CHECKPOINTS must come from the BackfillCheckpoints parameter (the hook and the serving functions read the same declarations)")
	}
}

// docs/OPERATIONS.md's alarm table names every alarm of the template by
// logical id, and nothing else, so the runbook cannot drift from the stack.
func TestOperationsAlarmTable(t *testing.T) {
	root := loadYAML(t)
	b, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Alarms\n")
	if start < 0 {
		t.Fatal("docs/OPERATIONS.md has no Alarms section")
	}
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range alarmID.FindAllStringSubmatch(cells[1], -1) {
			if listed[m[1]] {
				t.Errorf("OPERATIONS.md lists %s twice", m[1])
			}
			listed[m[1]] = true
		}
	}
	inTemplate := map[string]bool{}
	for _, id := range resourcesOfType(root, "AWS::CloudWatch::Alarm") {
		inTemplate[id] = true
		if !listed[id] {
			t.Errorf("template alarm %s is missing from docs/OPERATIONS.md#alarms", id)
		}
	}
	for id := range listed {
		if !inTemplate[id] {
			t.Errorf("docs/OPERATIONS.md#alarms lists %s, which template.yaml does not define", id)
		}
	}
}

var alarmID = regexp.MustCompile("`([A-Za-z0-9]+Alarm)`")

// The metrics the template derives from the API access log (function
// "gateway") come from a metric filter of the access log group whose
// dimension the log format carries, are catalogue metrics, and are the
// only source of function=gateway series an alarm reads.
func TestTemplateAccessLogMetrics(t *testing.T) {
	root := loadYAML(t)
	format := scalar(get(root, "Resources", "SyncApi", "Properties", "AccessLogSettings", "Format"))
	var fields map[string]string
	if err := json.Unmarshal([]byte(format), &fields); err != nil {
		t.Fatalf("access log format is not a JSON object of strings: %v", err)
	}
	produced := map[string]bool{}
	for _, id := range resourcesOfType(root, "AWS::Logs::MetricFilter") {
		p := get(root, "Resources", id, "Properties")
		if !refTo(get(p, "LogGroupName"), "ApiAccessLogGroup") {
			continue
		}
		for _, mt := range get(p, "MetricTransformations").Content {
			if !refTo(get(mt, "MetricNamespace"), "MetricsNamespace") {
				t.Errorf("%s: namespace must be !Ref MetricsNamespace", id)
			}
			name := scalar(get(mt, "MetricName"))
			if _, ok := metrics.Lookup(name); !ok {
				t.Errorf("%s: %s is not in the catalogue", id, name)
			}
			ds := get(mt, "Dimensions")
			if ds == nil || len(ds.Content) != 1 || scalar(get(ds.Content[0], "Key")) != metrics.DimFunction ||
				scalar(get(ds.Content[0], "Value")) != "$."+metrics.DimFunction || fields[metrics.DimFunction] != metrics.FunctionGateway {
				t.Errorf("%s: want one dimension function = $.function, and \"function\":%q in the access log format", id, metrics.FunctionGateway)
			}
			produced[name] = true
		}
	}
	if !produced[metrics.RequestsOverCap.Name] {
		t.Error("no access-log metric filter counts API Gateway's 413s (requestsOverCap)")
	}
	for _, id := range resourcesOfType(root, "AWS::CloudWatch::Alarm") {
		for _, r := range alarmMetrics(t, root, id) {
			if r.ours && r.dimensions[metrics.DimFunction] == metrics.FunctionGateway && !produced[r.name] {
				t.Errorf("%s: reads %s of function=gateway, which no access-log metric filter produces", r.at, r.name)
			}
		}
	}
}

// A new stack runs the migration step once (docs/OPERATIONS.md "Rolling
// schema upgrades"): CloudFormation creates its aliases without a
// CodeDeploy deployment, so no hook runs. The custom resource
// MigrateOnCreate is served by the hook function, exists only when the
// stack creates its table (another stack's older build may serve an
// existing one), and references the alias of every traffic-shifted
// function, so CloudFormation creates it only once each of them points at
// this build (on a stack update that adds it: after their deployments).
func TestTemplateMigrateOnCreate(t *testing.T) {
	root := loadYAML(t)
	r := get(root, "Resources", "MigrateOnCreate")
	if r == nil {
		t.Fatal("no MigrateOnCreate custom resource")
	}
	if ty := scalar(get(r, "Type")); !strings.HasPrefix(ty, "Custom::") {
		t.Errorf("MigrateOnCreate: type %q, want a custom resource", ty)
	}
	if c := scalar(get(r, "Condition")); c != "CreateSyncTable" {
		t.Errorf("MigrateOnCreate: condition %q, want CreateSyncTable (only a table the stack created has no older build serving it)", c)
	}
	p := get(r, "Properties")
	tok := get(p, "ServiceToken")
	if tok == nil || tok.Tag != "!GetAtt" || tok.Value != app.MigrateHookJob.LogicalID+".Arn" {
		t.Errorf("MigrateOnCreate: ServiceToken must be !GetAtt %s.Arn", app.MigrateHookJob.LogicalID)
	}
	// Every alias reference among the properties, direct or under !If.
	aliases := map[string]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil {
			return
		}
		if n.Tag == "!Ref" && strings.HasSuffix(n.Value, ".Alias") {
			aliases[strings.TrimSuffix(n.Value, ".Alias")] = true
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(p)
	res := get(root, "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		id, fn := res.Content[i].Value, res.Content[i+1]
		if scalar(get(fn, "Type")) != "AWS::Serverless::Function" || get(fn, "Properties", "DeploymentPreference") == nil {
			continue
		}
		if !aliases[id] {
			t.Errorf("MigrateOnCreate does not reference %s.Alias: it could run before %s's traffic shifted", id, id)
		}
	}
	if len(aliases) < len(app.Functions) {
		t.Errorf("MigrateOnCreate references %d aliases, fewer than the %d request functions", len(aliases), len(app.Functions))
	}
}
