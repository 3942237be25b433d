package functions

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/intrinsics"
	"gopkg.in/yaml.v3"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
)

const templatePath = "../template.yaml"

// node helpers over yaml.v3, which keeps CloudFormation's short-form tags
// (!Ref, !GetAtt, !Sub, !If) on the nodes instead of failing on them.

func loadYAML(t *testing.T) *yaml.Node {
	t.Helper()
	b, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

func get(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func keys(n *yaml.Node) []string {
	var out []string
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			out = append(out, n.Content[i].Value)
		}
	}
	return out
}

// scalar returns a plain scalar's value, or "" for anything tagged.
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return ""
	}
	return n.Value
}

// refTo reports whether n is `!Ref name` (or {Ref: name}).
func refTo(n *yaml.Node, name string) bool {
	if n == nil {
		return false
	}
	if n.Tag == "!Ref" {
		return n.Value == name
	}
	return scalar(get(n, "Ref")) == name
}

// tableRef reports whether n names the sync table: `!Ref SyncTable`, or
// `!If [CreateSyncTable, !Ref SyncTable, !Ref ExistingTableName]` (the
// stack can serve a restored table instead of creating one).
func tableRef(n *yaml.Node) bool {
	if refTo(n, "SyncTable") {
		return true
	}
	if n == nil || n.Tag != "!If" || n.Kind != yaml.SequenceNode || len(n.Content) != 3 {
		return false
	}
	return n.Content[0].Value == "CreateSyncTable" && refTo(n.Content[1], "SyncTable") && refTo(n.Content[2], "ExistingTableName")
}

func resourcesOfType(root *yaml.Node, typ string) []string {
	var out []string
	res := get(root, "Resources")
	for _, id := range keys(res) {
		if scalar(get(res, id, "Type")) == typ {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// openTemplate parses with goformation. CloudFormation hands a
// CommaDelimitedList parameter over as a list; goformation would substitute
// the raw default string, so list parameters are overridden with the list.
func openTemplate(t *testing.T) *cloudformation.Template {
	t.Helper()
	root := loadYAML(t)
	over := map[string]interface{}{}
	params := get(root, "Parameters")
	for _, name := range keys(params) {
		if scalar(get(params, name, "Type")) == "CommaDelimitedList" {
			var l []interface{}
			for _, v := range strings.Split(scalar(get(params, name, "Default")), ",") {
				l = append(l, v)
			}
			over[name] = l
		}
		// A "true"/"false" String parameter feeds boolean properties; CloudFormation
		// converts it, goformation needs the boolean.
		if d := scalar(get(params, name, "Default")); (d == "true" || d == "false") && len(get(params, name, "AllowedValues").Content) == 2 {
			over[name] = d == "true"
		}
	}
	// Properties goformation's (older) SAM schema does not model yet are
	// removed before it parses; TestTemplateOperations checks them.
	for _, path := range unmodelled {
		if parent := get(root, path[:len(path)-1]...); parent != nil && parent.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(parent.Content); i += 2 {
				if parent.Content[i].Value == path[len(path)-1] {
					parent.Content = append(parent.Content[:i], parent.Content[i+2:]...)
					break
				}
			}
		}
	}
	b, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := goformation.ParseYAMLWithOptions(b, &intrinsics.ProcessorOptions{ParameterOverrides: over})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

var unmodelled = [][]string{
	{"Resources", "SyncApi", "Properties", "AccessLogSettings"},
	// TestTemplateRealtimeTier checks it.
	{"Resources", "RealtimeListener", "Properties", "ListenerAttributes"},
	// TestTemplateWarmThroughput and TestTemplateSpendCaps check them.
	{"Resources", "SyncTable", "Properties", "WarmThroughput"},
	{"Resources", "SyncTable", "Properties", "OnDemandThroughput"},
}

// goformation parses the whole template with SAM's and CloudFormation's
// resource schemas (property names and types).
func TestTemplateParses(t *testing.T) {
	tmpl := openTemplate(t)
	fns := tmpl.GetAllServerlessFunctionResources()
	if len(fns) != len(app.Functions)+len(app.Jobs) {
		t.Fatalf("%d functions in the template, %d in the code", len(fns), len(app.Functions)+len(app.Jobs))
	}
	if len(tmpl.GetAllServerlessHttpApiResources()) != 1 {
		t.Fatal("want exactly one AWS::Serverless::HttpApi")
	}
	for _, name := range []string{"ApiUrl", "TableName", "BucketName"} {
		if _, ok := tmpl.Outputs[name]; !ok {
			t.Errorf("output %s missing", name)
		}
	}
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

type reference struct{ kind, target, at string }

// collect finds every Ref, GetAtt, Sub variable and condition use.
func collect(n *yaml.Node, at string, out *[]reference) {
	add := func(kind, target string) { *out = append(*out, reference{kind, target, at}) }
	subRefs := func(s string, locals map[string]bool) {
		for _, m := range subVar.FindAllStringSubmatch(s, -1) {
			name, _, _ := strings.Cut(m[1], ".")
			if !locals[name] {
				add("Sub", name)
			}
		}
	}
	switch n.Tag {
	case "!Ref":
		add("Ref", n.Value)
	case "!GetAtt":
		if n.Kind == yaml.ScalarNode {
			name, _, _ := strings.Cut(n.Value, ".")
			add("GetAtt", name)
		} else if len(n.Content) > 0 {
			add("GetAtt", n.Content[0].Value)
		}
	case "!Sub":
		if n.Kind == yaml.ScalarNode {
			subRefs(n.Value, nil)
		} else if len(n.Content) == 2 {
			locals := map[string]bool{}
			for _, k := range keys(n.Content[1]) {
				locals[k] = true
			}
			subRefs(n.Content[0].Value, locals)
		}
	case "!If":
		if len(n.Content) > 0 {
			add("Condition", n.Content[0].Value)
		}
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			switch k {
			case "Ref":
				add("Ref", v.Value)
			case "Fn::GetAtt":
				if v.Kind == yaml.SequenceNode && len(v.Content) > 0 {
					add("GetAtt", v.Content[0].Value)
				} else {
					name, _, _ := strings.Cut(v.Value, ".")
					add("GetAtt", name)
				}
			case "Fn::Sub":
				if v.Kind == yaml.ScalarNode {
					subRefs(v.Value, nil)
				}
			case "Condition":
				if v.Kind == yaml.ScalarNode && !strings.Contains(at, "PolicyDocument") {
					add("Condition", v.Value)
				}
			}
			collect(v, at+"/"+k, out)
		}
		return
	}
	for i, c := range n.Content {
		collect(c, fmt.Sprintf("%s[%d]", at, i), out)
	}
}

// Every Ref/GetAtt/Sub target and every condition exists: goformation does
// not check this, and CloudFormation only finds out at deploy time.
func TestTemplateReferencesResolve(t *testing.T) {
	root := loadYAML(t)
	resources := map[string]bool{}
	for _, k := range keys(get(root, "Resources")) {
		resources[k] = true
	}
	params := map[string]bool{}
	for _, k := range keys(get(root, "Parameters")) {
		params[k] = true
	}
	conds := map[string]bool{}
	for _, k := range keys(get(root, "Conditions")) {
		conds[k] = true
	}
	// SAM generates the CodeDeploy application of DeploymentPreference.
	for _, id := range resourcesOfType(root, "AWS::Serverless::Function") {
		if get(root, "Resources", id, "Properties", "DeploymentPreference") != nil {
			resources["ServerlessDeploymentApplication"] = true
		}
		// and the execution role <Id>Role of a function without a Role.
		if get(root, "Resources", id, "Properties", "Role") == nil {
			resources[id+"Role"] = true
		}
		// With AutoPublishAlias, `!Ref <Id>.Alias` names its alias.
		if get(root, "Globals", "Function", "AutoPublishAlias") != nil || get(root, "Resources", id, "Properties", "AutoPublishAlias") != nil {
			resources[id+".Alias"] = true
		}
	}
	var refs []reference
	collect(root, "", &refs)
	if len(refs) < 20 {
		t.Fatalf("found only %d references: the walker is broken", len(refs))
	}
	for _, r := range refs {
		pseudo := strings.HasPrefix(r.target, "AWS::")
		ok := false
		switch r.kind {
		case "Ref", "Sub":
			ok = pseudo || resources[r.target] || params[r.target]
		case "GetAtt":
			ok = resources[r.target]
		case "Condition":
			ok = conds[r.target]
		}
		if !ok {
			t.Errorf("%s %q at %s does not exist", r.kind, r.target, r.at)
		}
	}
	// The API's default authorizer is one it defines.
	auth := get(root, "Resources", "SyncApi", "Properties", "Auth")
	if def := scalar(get(auth, "DefaultAuthorizer")); get(auth, "Authorizers", def) == nil {
		t.Errorf("DefaultAuthorizer %q is not defined", def)
	}
}

// Runtime, architecture, handler and build method of every function, and
// the Makefile target SAM will call in its CodeUri.
func TestTemplateFunctions(t *testing.T) {
	root := loadYAML(t)
	globals := get(root, "Globals", "Function")
	prop := func(id, name string) *yaml.Node {
		if n := get(root, "Resources", id, "Properties", name); n != nil {
			return n
		}
		return get(globals, name)
	}
	ids := resourcesOfType(root, "AWS::Serverless::Function")
	var want []string
	all := append(slices.Clone(app.Functions), app.Jobs...)
	for _, f := range all {
		want = append(want, f.LogicalID)
	}
	sort.Strings(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("template functions %v, code functions %v", ids, want)
	}
	for _, f := range all {
		id := f.LogicalID
		if rt := scalar(prop(id, "Runtime")); rt != "provided.al2023" {
			t.Errorf("%s: Runtime %q", id, rt)
		}
		if a := prop(id, "Architectures"); a == nil || len(a.Content) != 1 || a.Content[0].Value != "arm64" {
			t.Errorf("%s: Architectures must be [arm64]", id)
		}
		if h := scalar(prop(id, "Handler")); h != "bootstrap" {
			t.Errorf("%s: Handler %q", id, h)
		}
		if bm := scalar(get(root, "Resources", id, "Metadata", "BuildMethod")); bm != "makefile" {
			t.Errorf("%s: Metadata.BuildMethod %q", id, bm)
		}
		codeURI := scalar(prop(id, "CodeUri"))
		dir := filepath.Join(filepath.Dir(templatePath), codeURI)
		if fi, err := os.Stat(dir); codeURI == "" || err != nil || !fi.IsDir() {
			t.Errorf("%s: CodeUri %q is not a folder (%v)", id, codeURI, err)
			continue
		}
		checkMakeTarget(t, filepath.Join(dir, "Makefile"), f)
		if fi, err := os.Stat(filepath.Join(filepath.Dir(templatePath), f.Dir, "main.go")); err != nil || fi.IsDir() {
			t.Errorf("%s: %s/main.go missing", id, f.Dir)
		}
		if len(f.Endpoints) == 0 {
			continue // no API Gateway in front of a job
		}
		if to, err := strconv.Atoi(scalar(prop(id, "Timeout"))); err != nil || to < 1 || to > 29 {
			t.Errorf("%s: Timeout %d must stay under API Gateway's 30 s integration timeout", id, to)
		}
	}
}

// checkMakeTarget asks make for the recipe of build-<LogicalID> (a dry
// run, as SAM would invoke it) and checks that it builds the function's
// package for arm64 into $(ARTIFACTS_DIR)/bootstrap and copies the schema
// beside it (SYNC_SCHEMA_PATH's default).
func checkMakeTarget(t *testing.T, makefile string, f app.Function) {
	t.Helper()
	target := "build-" + f.LogicalID
	out, err := exec.Command("make", "-n", "-C", filepath.Dir(makefile), "-f", filepath.Base(makefile), target, "ARTIFACTS_DIR=/artifacts").CombinedOutput()
	if err != nil {
		t.Errorf("make -n %s: %v\n%s", target, err, out)
		return
	}
	all := string(out)
	if !strings.Contains(all, "./"+f.Dir) || !strings.Contains(all, "-o /artifacts/bootstrap") || !strings.Contains(all, "GOARCH=arm64") ||
		!strings.Contains(all, "-tags lambda.norpc") || !strings.Contains(all, "CGO_ENABLED=0") {
		t.Errorf("%s does not build ./%s for arm64 into $(ARTIFACTS_DIR)/bootstrap:\n%s", target, f.Dir, all)
	}
	if !strings.Contains(all, "/artifacts/schema.json") {
		t.Errorf("%s does not copy the schema into $(ARTIFACTS_DIR)/schema.json (SYNC_SCHEMA_PATH default):\n%s", target, all)
	}
}

// The HTTP API routes are exactly the code's route table, all on the one
// API, and every route has the JWT authorizer (the API default).
func TestTemplateRoutes(t *testing.T) {
	root := loadYAML(t)
	for _, f := range app.Functions {
		events := get(root, "Resources", f.LogicalID, "Properties", "Events")
		var got, want []string
		for _, name := range keys(events) {
			ev := get(events, name)
			if scalar(get(ev, "Type")) != "HttpApi" {
				t.Errorf("%s.%s: event type %q", f.LogicalID, name, scalar(get(ev, "Type")))
				continue
			}
			p := get(ev, "Properties")
			if !refTo(get(p, "ApiId"), "SyncApi") {
				t.Errorf("%s.%s: ApiId is not !Ref SyncApi", f.LogicalID, name)
			}
			if a := get(p, "Auth"); a != nil {
				t.Errorf("%s.%s: route overrides the API's authorizer", f.LogicalID, name)
			}
			got = append(got, scalar(get(p, "Method"))+" "+scalar(get(p, "Path")))
		}
		for _, e := range f.Endpoints {
			want = append(want, e.Method+" "+e.Path)
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s routes %v, code %v", f.LogicalID, got, want)
		}
	}
}

// The table's key schema, attribute types and TTL attribute are those
// dynamostore creates, on-demand, with point-in-time recovery.
func TestTemplateTable(t *testing.T) {
	tmpl := openTemplate(t)
	tables := tmpl.GetAllDynamoDBTableResources()
	tb, ok := tables["SyncTable"]
	if !ok || len(tables) != 1 {
		t.Fatalf("want exactly one table SyncTable, got %d", len(tables))
	}
	var got, want []string
	for _, k := range tb.KeySchema {
		got = append(got, k.AttributeName+"/"+k.KeyType)
	}
	for _, k := range dynamostore.KeySchema {
		want = append(want, aws.ToString(k.AttributeName)+"/"+string(k.KeyType))
	}
	if !slices.Equal(got, want) {
		t.Errorf("KeySchema %v, dynamostore %v", got, want)
	}
	got, want = nil, nil
	for _, a := range tb.AttributeDefinitions {
		got = append(got, a.AttributeName+"/"+a.AttributeType)
	}
	for _, a := range dynamostore.AttributeDefinitions {
		want = append(want, aws.ToString(a.AttributeName)+"/"+string(a.AttributeType))
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("AttributeDefinitions %v, dynamostore %v", got, want)
	}
	if len(tb.GlobalSecondaryIndexes)+len(tb.LocalSecondaryIndexes) != 0 {
		t.Error("dynamostore declares no secondary index")
	}
	if tb.TimeToLiveSpecification == nil || aws.ToString(tb.TimeToLiveSpecification.AttributeName) != dynamostore.TTLAttribute || !tb.TimeToLiveSpecification.Enabled {
		t.Errorf("TTL must be enabled on %q", dynamostore.TTLAttribute)
	}
	if aws.ToString(tb.BillingMode) != "PAY_PER_REQUEST" {
		t.Error("BillingMode must be PAY_PER_REQUEST")
	}
	if p := tb.PointInTimeRecoverySpecification; p == nil || !aws.ToBool(p.PointInTimeRecoveryEnabled) {
		t.Error("point-in-time recovery must be enabled")
	}
	if tb.AWSCloudFormationDeletionPolicy != "Retain" {
		t.Error("the table must survive stack deletion (DeletionPolicy: Retain)")
	}
}

// The bucket is private and encrypted, and its lifecycle rule covers the
// keys s3segments writes with the same day count the functions are given.
func TestTemplateBucket(t *testing.T) {
	tmpl := openTemplate(t)
	b, ok := tmpl.GetAllS3BucketResources()["SegmentBucket"]
	if !ok {
		t.Fatal("SegmentBucket missing")
	}
	pab := b.PublicAccessBlockConfiguration
	if pab == nil || !aws.ToBool(pab.BlockPublicAcls) || !aws.ToBool(pab.BlockPublicPolicy) || !aws.ToBool(pab.IgnorePublicAcls) || !aws.ToBool(pab.RestrictPublicBuckets) {
		t.Error("public access must be blocked")
	}
	if b.BucketEncryption == nil || len(b.BucketEncryption.ServerSideEncryptionConfiguration) == 0 {
		t.Error("default encryption missing")
	}
	// The rule s3segments' guarantees assume, for the lifetime the
	// functions are configured with by default.
	root := loadYAML(t)
	env := templateEnv(t, root, nil)
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := s3segments.LifecycleRule("", time.Duration(cfg.SegmentObjectDays)*24*time.Hour)
	key, _ := s3segments.New(nil, "b", "", nil, "t", s3segments.Options{}).ObjectKey("sha256:" + strings.Repeat("ab", 32))
	found := false
	for _, r := range b.LifecycleConfiguration.Rules {
		if r.Status != "Enabled" || r.ExpirationInDays == nil {
			continue
		}
		if aws.ToString(r.Prefix) == aws.ToString(want.Filter.Prefix) && int32(*r.ExpirationInDays) == aws.ToInt32(want.Expiration.Days) && strings.HasPrefix(key, aws.ToString(r.Prefix)) {
			found = true
		}
	}
	if !found {
		t.Errorf("no enabled rule expiring %s after %d days (s3segments.LifecycleRule; object key %s)", aws.ToString(want.Filter.Prefix), aws.ToInt32(want.Expiration.Days), key)
	}
	rule := get(root, "Resources", "SegmentBucket", "Properties", "LifecycleConfiguration", "Rules").Content[0]
	vars := get(root, "Globals", "Function", "Environment", "Variables")
	days := get(vars, "SYNC_SEGMENT_OBJECT_DAYS") // !Sub: an environment value is a string
	if !refTo(get(rule, "ExpirationInDays"), "SegmentObjectExpirationDays") || days.Tag != "!Sub" || days.Value != "${SegmentObjectExpirationDays}" {
		t.Error("the lifecycle rule and SYNC_SEGMENT_OBJECT_DAYS must both come from SegmentObjectExpirationDays")
	}
	if !refTo(get(vars, "SYNC_SEGMENT_TTL"), "SegmentTtl") {
		t.Error("SYNC_SEGMENT_TTL must come from the SegmentTtl parameter")
	}
	// Push outcomes expire through the table's TTL attribute (issue 20).
	if !refTo(get(vars, "SYNC_OUTCOME_TTL"), "OutcomeTtl") {
		t.Error("SYNC_OUTCOME_TTL must come from the OutcomeTtl parameter")
	}
	if ttl := get(root, "Resources", "SyncTable", "Properties", "TimeToLiveSpecification"); scalar(get(ttl, "AttributeName")) != dynamostore.TTLAttribute || scalar(get(ttl, "Enabled")) != "true" {
		t.Errorf("SyncTable: TimeToLiveSpecification on %q, enabled", dynamostore.TTLAttribute)
	}
}

// templateEnv resolves the functions' environment with parameter defaults
// (resources become placeholder names), as a deploy with defaults would.
func templateEnv(t *testing.T, root *yaml.Node, overrides map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	vars := get(root, "Globals", "Function", "Environment", "Variables")
	for _, k := range keys(vars) {
		v := get(vars, k)
		switch {
		case v.Tag == "!Sub" && strings.HasPrefix(v.Value, "${") && strings.HasSuffix(v.Value, "}"):
			env[k] = scalar(get(root, "Parameters", v.Value[2:len(v.Value)-1], "Default"))
		case tableRef(v):
			// Default parameters: the stack creates its own table.
			env[k] = "synctable"
		case v.Tag == "!Ref":
			if p := get(root, "Parameters", v.Value); p != nil {
				env[k] = scalar(get(p, "Default"))
			} else {
				env[k] = strings.ToLower(v.Value)
			}
		default:
			env[k] = scalar(v)
		}
	}
	for k, v := range overrides {
		env[k] = v
	}
	return env
}

// Every configuration variable is declared (so env.local.json can override
// it, SAM only overrides declared variables) and the deployed defaults
// form a valid configuration.
func TestTemplateEnvironment(t *testing.T) {
	root := loadYAML(t)
	declared := keys(get(root, "Globals", "Function", "Environment", "Variables"))
	var want []string
	for _, v := range config.Vars {
		want = append(want, v.Name)
	}
	sort.Strings(declared)
	sort.Strings(want)
	if !slices.Equal(declared, want) {
		t.Errorf("template declares %v\nconfig reads     %v", declared, want)
	}
	env := templateEnv(t, root, nil)
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("deployed defaults are not a valid configuration: %v", err)
	}
	if cfg.AuthMode != config.AuthJWTAuthorizer || cfg.SignedURLs != config.SignedPresign {
		t.Errorf("deployed auth %s, signed URLs %s", cfg.AuthMode, cfg.SignedURLs)
	}
	// Per-function environments are not allowed to drift from Globals.
	for _, f := range app.Functions {
		if get(root, "Resources", f.LogicalID, "Properties", "Environment") != nil {
			t.Errorf("%s overrides Globals.Function.Environment", f.LogicalID)
		}
	}
}

// Least privilege: push and pull write the table and segment objects; the
// segment function only reads. No wildcard actions or resources, and no
// Scan: no request path reads the whole table (issue 11), so the
// DynamoDB actions are listed rather than taken from a SAM policy
// template (those include Scan), on the sync table's ARN only.
func TestTemplatePolicies(t *testing.T) {
	root := loadYAML(t)
	items := []string{"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem", "dynamodb:DeleteItem",
		"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"}
	reads := []string{"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:Query"}
	wantS3 := map[string][]string{
		// Push: segments, plus the §5.9.6 blob check on blobs/.
		"PushFunction":    append(slices.Clone(items), "s3:DeleteObject", "s3:GetObject", "s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:PutObject"),
		"BlobFunction":    append(slices.Clone(reads), "s3:DeleteObject", "s3:GetObject", "s3:ListBucket", "s3:PutObject"),
		"PullFunction":    append(slices.Clone(items), "s3:GetObject", "s3:ListBucket", "s3:PutObject"),
		"SegmentFunction": append(slices.Clone(reads), "s3:GetObject", "s3:ListBucket"),
	}
	for _, f := range app.Functions {
		pols := get(root, "Resources", f.LogicalID, "Properties", "Policies")
		if pols == nil || pols.Kind != yaml.SequenceNode {
			t.Errorf("%s: no Policies list", f.LogicalID)
			continue
		}
		var templates, actions []string
		for _, p := range pols.Content {
			for _, k := range keys(p) {
				if k != "Statement" {
					templates = append(templates, k)
					if !tableRef(get(p, k, "TableName")) {
						t.Errorf("%s: %s is not scoped to SyncTable", f.LogicalID, k)
					}
					continue
				}
				for _, st := range get(p, "Statement").Content {
					a := get(st, "Action")
					if a.Kind == yaml.SequenceNode {
						for _, x := range a.Content {
							actions = append(actions, x.Value)
						}
					} else {
						actions = append(actions, a.Value)
					}
					r := get(st, "Resource")
					if scalar(r) == "*" {
						t.Errorf("%s: wildcard resource", f.LogicalID)
					}
					if a.Kind == yaml.SequenceNode && len(a.Content) > 0 && strings.HasPrefix(a.Content[0].Value, "dynamodb:") {
						// !Sub [".../table/${T}", {T: the sync table}]
						if r == nil || r.Tag != "!Sub" || r.Kind != yaml.SequenceNode || len(r.Content) != 2 ||
							!strings.HasSuffix(r.Content[0].Value, ":table/${T}") || !tableRef(get(r.Content[1], "T")) {
							t.Errorf("%s: DynamoDB statement not scoped to the sync table", f.LogicalID)
						}
					}
				}
			}
		}
		if len(templates) != 0 {
			t.Errorf("%s: policy templates %v, want none", f.LogicalID, templates)
		}
		sort.Strings(actions)
		if !slices.Equal(actions, wantS3[f.LogicalID]) {
			t.Errorf("%s: actions %v, want %v", f.LogicalID, actions, wantS3[f.LogicalID])
		}
		if slices.Contains(actions, "dynamodb:Scan") {
			t.Errorf("%s: may Scan the table", f.LogicalID)
		}
	}
	// The jobs (prune, migration hook) find partitions through the
	// registry and items by key: their table access is the same listed
	// item actions, never a SAM policy template. The fanout function only
	// reads the instance registry (TestTemplateRealtimeTier).
	for _, j := range app.Jobs {
		if j.LogicalID == app.FanoutJob.LogicalID {
			continue
		}
		pols := get(root, "Resources", j.LogicalID, "Properties", "Policies")
		if pols == nil || pols.Kind != yaml.SequenceNode || len(pols.Content) == 0 || !tableItemStatement(pols.Content[0]) {
			t.Errorf("%s: first policy must list item actions on the sync table", j.LogicalID)
			continue
		}
		for _, p := range pols.Content {
			for _, k := range keys(p) {
				if k != "Statement" {
					t.Errorf("%s: policy template %s, want listed actions", j.LogicalID, k)
				}
			}
			for _, st := range get(p, "Statement").Content {
				if a := get(st, "Action"); scalar(a) == "dynamodb:Scan" || (a.Kind == yaml.SequenceNode && slices.ContainsFunc(a.Content, func(x *yaml.Node) bool { return x.Value == "dynamodb:Scan" })) {
					t.Errorf("%s: may Scan the table", j.LogicalID)
				}
			}
		}
	}
}

// tableItemStatement reports whether p is one statement allowing
// DynamoDB's item actions (reads, writes, transactions' condition checks;
// not Scan) on the sync table's ARN only.
func tableItemStatement(p *yaml.Node) bool {
	sts := get(p, "Statement")
	if sts == nil || len(sts.Content) != 1 {
		return false
	}
	st := sts.Content[0]
	a := get(st, "Action")
	if a == nil || a.Kind != yaml.SequenceNode {
		return false
	}
	var acts []string
	for _, x := range a.Content {
		acts = append(acts, x.Value)
	}
	sort.Strings(acts)
	want := []string{"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem", "dynamodb:DeleteItem",
		"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"}
	if !slices.Equal(acts, want) {
		return false
	}
	r := get(st, "Resource")
	return r != nil && r.Tag == "!Sub" && r.Kind == yaml.SequenceNode && len(r.Content) == 2 &&
		strings.HasSuffix(r.Content[0].Value, ":table/${T}") && tableRef(get(r.Content[1], "T"))
}

// Each function has a log group with retention, named the way Lambda
// names it so the function writes there.
func TestTemplateLogGroups(t *testing.T) {
	root := loadYAML(t)
	groups := map[string]bool{}
	for _, id := range resourcesOfType(root, "AWS::Logs::LogGroup") {
		p := get(root, "Resources", id, "Properties")
		name := get(p, "LogGroupName")
		if name != nil && name.Tag == "!Sub" {
			groups[name.Value] = refTo(get(p, "RetentionInDays"), "LogRetentionDays")
		}
	}
	for _, f := range append(slices.Clone(app.Functions), app.Jobs...) {
		if ok, found := groups["/aws/lambda/${"+f.LogicalID+"}"]; !found || !ok {
			t.Errorf("%s: no log group /aws/lambda/${%s} with RetentionInDays: !Ref LogRetentionDays", f.LogicalID, f.LogicalID)
		}
	}
}

// A restored table has no stream (docs/OPERATIONS.md, point-in-time
// restore): with ExistingTableName the stack must be given the stream that
// `syncular-admin restore-prepare` enables, and the fanout mapping must
// follow that table's stream, never a placeholder.
func TestTemplateRestoreStream(t *testing.T) {
	root := loadYAML(t)
	if got := scalar(get(root, "Resources", "SyncTable", "Properties", "StreamSpecification", "StreamViewType")); got != string(dynamostore.StreamViewType) {
		t.Errorf("SyncTable stream %q, restore-prepare enables %q", got, dynamostore.StreamViewType)
	}

	param := get(root, "Parameters", "ExistingTableStreamArn")
	if param == nil {
		t.Fatal("no parameter ExistingTableStreamArn")
	}
	if d := get(param, "Default"); d == nil || d.Value != "" {
		t.Errorf("ExistingTableStreamArn default must be empty (a placeholder ARN deploys a mapping to no stream), got %v", d)
	}
	re, err := regexp.Compile(scalar(get(param, "AllowedPattern")))
	if err != nil {
		t.Fatalf("AllowedPattern: %v", err)
	}
	for arn, want := range map[string]bool{
		"": true,
		"arn:aws:dynamodb:eu-west-1:123456789012:table/sync-restored/stream/2026-12-01T16:45:50.123":      true,
		"arn:aws-us-gov:dynamodb:us-gov-west-1:123456789012:table/t.1_x-y/stream/2026-12-01T16:45:50.123": true,
		"arn:aws:dynamodb:eu-west-1:123456789012:table/sync-restored":                                     false,
		"sync-restored":                false,
		"arn:aws:s3:::bucket/stream/x": false,
	} {
		if re.MatchString(arn) != want {
			t.Errorf("AllowedPattern matches %q: %v, want %v", arn, !want, want)
		}
	}

	// The Rule: when ExistingTableName is set, ExistingTableStreamArn must be.
	var found bool
	for _, id := range keys(get(root, "Rules")) {
		rule := get(root, "Rules", id)
		cond := get(rule, "RuleCondition")
		if !isNotEmpty(cond, "ExistingTableName") {
			continue
		}
		for _, a := range get(rule, "Assertions").Content {
			if isNotEmpty(get(a, "Assert"), "ExistingTableStreamArn") && scalar(get(a, "AssertDescription")) != "" {
				found = true
			}
		}
	}
	if !found {
		t.Error("no Rule requires ExistingTableStreamArn when ExistingTableName is set")
	}

	// The mapping and the fanout's stream grant follow the existing table.
	src := get(root, "Resources", "FanoutStreamMapping", "Properties", "EventSourceArn")
	if src == nil || src.Tag != "!If" || len(src.Content) != 3 || src.Content[0].Value != "CreateSyncTable" {
		t.Fatalf("FanoutStreamMapping EventSourceArn is not !If [CreateSyncTable, ...]")
	}
	if !mentions(src.Content[2], "ExistingTableStreamArn") || !mentions(src.Content[2], "ExistingTableName") {
		t.Error("with an existing table the mapping must name ExistingTableName's stream from ExistingTableStreamArn")
	}
}

// isNotEmpty reports whether n is `!Not [!Equals [!Ref param, ""]]`.
func isNotEmpty(n *yaml.Node, param string) bool {
	if n == nil || n.Tag != "!Not" || len(n.Content) != 1 {
		return false
	}
	eq := n.Content[0]
	if eq.Tag != "!Equals" || len(eq.Content) != 2 {
		return false
	}
	return refTo(eq.Content[0], param) && eq.Content[1].Kind == yaml.ScalarNode && eq.Content[1].Value == ""
}

// mentions reports whether the subtree n refers to param (a !Ref or a
// ${param} inside a !Sub string).
func mentions(n *yaml.Node, param string) bool {
	if n == nil {
		return false
	}
	if refTo(n, param) || (n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${"+param+"}")) {
		return true
	}
	for _, c := range n.Content {
		if mentions(c, param) {
			return true
		}
	}
	return false
}

// Forwarding (rolling schema upgrades): each gated function (push, pull)
// may invoke its own versions and nothing else, through a policy of its
// own attached to the role SAM creates for it, present only while the
// ForwardRefusedRequests parameter is on; no other policy of the stack
// grants lambda:InvokeFunction on them.
func TestTemplateForwardPolicies(t *testing.T) {
	root := loadYAML(t)
	if !refTo(get(root, "Globals", "Function", "Environment", "Variables", "SYNC_FORWARD"), "ForwardRefusedRequests") {
		t.Error("SYNC_FORWARD is not the ForwardRefusedRequests parameter")
	}
	gated := map[string]bool{}
	for _, f := range app.Functions {
		gated[f.LogicalID] = f.Routes&(httpapi.RouteSync|httpapi.RoutePush|httpapi.RoutePull) != 0
	}
	granted := map[string]bool{}
	for _, id := range resourcesOfType(root, "AWS::IAM::Policy") {
		r := get(root, "Resources", id)
		for _, st := range get(r, "Properties", "PolicyDocument", "Statement").Content {
			if scalar(get(st, "Action")) != "lambda:InvokeFunction" {
				continue
			}
			res := get(st, "Resource")
			fn, ok := strings.CutSuffix(res.Value, ".Arn}:*")
			fn = strings.TrimPrefix(fn, "${")
			roles := get(r, "Properties", "Roles")
			if res.Tag != "!Sub" || !ok || !gated[fn] || roles == nil || len(roles.Content) != 1 || !refTo(roles.Content[0], fn+"Role") {
				t.Errorf("%s: lambda:InvokeFunction on %s for %v: want a gated function's own versions, by its own role", id, res.Value, roles)
				continue
			}
			if scalar(get(r, "Condition")) != "ForwardOn" {
				t.Errorf("%s: not conditioned on ForwardOn", id)
			}
			granted[fn] = true
		}
	}
	for fn, g := range gated {
		if g != granted[fn] {
			t.Errorf("%s: may invoke its own versions %t, want %t", fn, granted[fn], g)
		}
	}
	if c := get(root, "Conditions", "ForwardOn"); c == nil || c.Tag != "!Equals" || !refTo(c.Content[0], "ForwardRefusedRequests") || c.Content[1].Value != "on" {
		t.Error("condition ForwardOn is not ForwardRefusedRequests = on")
	}
}
