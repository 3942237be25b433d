package functions

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
)

// actionsOf lists a statement's actions (a scalar or a sequence).
func actionsOf(st *yaml.Node) []string {
	a := get(st, "Action")
	if a == nil {
		return nil
	}
	if a.Kind == yaml.SequenceNode {
		var out []string
		for _, x := range a.Content {
			out = append(out, x.Value)
		}
		return out
	}
	return []string{a.Value}
}

// The realtime endpoint is the tier (ECS Fargate behind an ALB): no API
// Gateway WebSocket API, no realtime function, no heartbeat schedule.
func TestTemplateHasNoWebSocketAPI(t *testing.T) {
	root := loadYAML(t)
	for _, id := range keys(get(root, "Resources")) {
		typ := scalar(get(root, "Resources", id, "Type"))
		if strings.HasPrefix(typ, "AWS::ApiGatewayV2::") {
			t.Errorf("%s: %s (the realtime endpoint is the tier; API Gateway WebSocket APIs refuse the binary rounds stock clients send)", id, typ)
		}
	}
	for _, gone := range []string{"RealtimeFunction", "RealtimeApi"} {
		if get(root, "Resources", gone) != nil {
			t.Errorf("%s is still in the template", gone)
		}
	}
	if get(root, "Parameters", "HeartbeatSchedule") != nil || get(root, "Resources", app.FanoutJob.LogicalID, "Properties", "Events") != nil {
		t.Error("the fanout function has no heartbeat schedule (the tier sends heartbeats)")
	}
	b, err := yaml.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "SYNC_REALTIME_ENDPOINT") || strings.Contains(string(b), "ManageConnections") {
		t.Error("the management API endpoint or permission is still referenced")
	}
}

func TestTemplateRealtimeTier(t *testing.T) {
	root := loadYAML(t)
	res := func(id string, path ...string) *yaml.Node {
		return get(root, append([]string{"Resources", id}, path...)...)
	}
	for p, def := range map[string]string{"RealtimeTier": "enabled", "RealtimeImageUri": "", "VpcId": "", "PublicSubnetIds": "",
		"TaskSubnetIds": "", "RealtimeCertificateArn": "", "RealtimeDesiredCount": "2", "RealtimeMinCount": "2", "RealtimeMaxCount": "10"} {
		n := get(root, "Parameters", p)
		if n == nil || scalar(get(n, "Default")) != def {
			t.Errorf("parameter %s with default %q", p, def)
		}
	}
	if get(root, "Rules", "RealtimeImageRequired") == nil {
		t.Error("a rule requires RealtimeImageUri when the tier is enabled")
	}
	// Every tier resource follows the switch; the VPC only without VpcId.
	for _, id := range keys(get(root, "Resources")) {
		typ := scalar(res(id, "Type"))
		cond := scalar(res(id, "Condition"))
		switch {
		case strings.HasPrefix(typ, "AWS::ECS::"), strings.HasPrefix(typ, "AWS::ElasticLoadBalancingV2::"),
			strings.HasPrefix(typ, "AWS::ApplicationAutoScaling::"), typ == "AWS::EC2::SecurityGroup", typ == "AWS::EC2::SecurityGroupIngress":
			if cond != "TierEnabled" {
				t.Errorf("%s (%s): Condition %q, want TierEnabled", id, typ, cond)
			}
		case strings.HasPrefix(typ, "AWS::EC2::"):
			if cond != "CreateVpc" {
				t.Errorf("%s (%s): Condition %q, want CreateVpc", id, typ, cond)
			}
		}
	}
	var endpoints []string
	for _, id := range resourcesOfType(root, "AWS::EC2::VPCEndpoint") {
		if scalar(res(id, "Properties", "VpcEndpointType")) == "Gateway" {
			endpoints = append(endpoints, res(id, "Properties", "ServiceName").Value)
		}
	}
	sort.Strings(endpoints)
	if !slices.Equal(endpoints, []string{"com.amazonaws.${AWS::Region}.dynamodb", "com.amazonaws.${AWS::Region}.s3"}) {
		t.Errorf("gateway endpoints %v, want DynamoDB and S3", endpoints)
	}
	if len(resourcesOfType(root, "AWS::EC2::Subnet")) != 2 {
		t.Error("the created VPC has two subnets")
	}

	// Fargate ARM64, the image parameter, both ports, the same settings
	// as the functions (Globals) and a stop timeout covering the drain.
	td := res("RealtimeTaskDefinition", "Properties")
	if scalar(get(td, "RuntimePlatform", "CpuArchitecture")) != "ARM64" || scalar(get(td, "RequiresCompatibilities").Content[0]) != "FARGATE" {
		t.Error("task definition: Fargate, ARM64")
	}
	c := get(td, "ContainerDefinitions").Content[0]
	if !refTo(get(c, "Image"), "RealtimeImageUri") {
		t.Error("container image: !Ref RealtimeImageUri")
	}
	var ports []string
	for _, pm := range get(c, "PortMappings").Content {
		ports = append(ports, scalar(get(pm, "ContainerPort")))
	}
	if !slices.Equal(ports, []string{"8080", "8081"}) {
		t.Errorf("container ports %v", ports)
	}
	var env []string
	for _, e := range get(c, "Environment").Content {
		env = append(env, scalar(get(e, "Name")))
	}
	globals := keys(get(root, "Globals", "Function", "Environment", "Variables"))
	sort.Strings(env)
	sort.Strings(globals)
	if !slices.Equal(env, globals) {
		t.Errorf("tier environment %v\nfunctions' environment %v", env, globals)
	}
	if scalar(get(c, "StopTimeout")) == "" {
		t.Error("container StopTimeout (SIGTERM → drain → exit)")
	}

	// Load balancer: health check on /healthz, ip targets, a draining
	// delay, an idle timeout parameter above a minute (heartbeats keep
	// sockets open), HTTPS when a certificate is given.
	tg := res("RealtimeTargetGroup", "Properties")
	if scalar(get(tg, "TargetType")) != "ip" || scalar(get(tg, "HealthCheckPath")) != "/healthz" || scalar(get(tg, "Port")) != "8080" {
		t.Error("target group: ip targets on 8080, health check /healthz")
	}
	attrs := map[string]*yaml.Node{}
	for _, a := range get(tg, "TargetGroupAttributes").Content {
		attrs[scalar(get(a, "Key"))] = get(a, "Value")
	}
	if v := attrs["deregistration_delay.timeout_seconds"]; v == nil || !strings.Contains(v.Value, "RealtimeDrainSeconds") {
		t.Error("target group: deregistration delay from RealtimeDrainSeconds")
	}
	lbAttrs := map[string]*yaml.Node{}
	for _, a := range res("RealtimeLoadBalancer", "Properties", "LoadBalancerAttributes").Content {
		lbAttrs[scalar(get(a, "Key"))] = get(a, "Value")
	}
	if v := lbAttrs["idle_timeout.timeout_seconds"]; v == nil || !strings.Contains(v.Value, "RealtimeIdleTimeout") ||
		scalar(get(root, "Parameters", "RealtimeIdleTimeout", "MinValue")) != "61" {
		t.Error("load balancer idle timeout: RealtimeIdleTimeout, at least 61 s")
	}
	if l := res("RealtimeListener", "Properties", "Protocol"); l == nil || l.Tag != "!If" || l.Content[0].Value != "HasCertificate" {
		t.Error("listener: HTTPS with RealtimeCertificateArn, else HTTP")
	}

	// Service: rolling deploy with circuit breaker, health check grace.
	svc := res("RealtimeService", "Properties")
	dc := get(svc, "DeploymentConfiguration")
	if scalar(get(dc, "DeploymentCircuitBreaker", "Enable")) != "true" || scalar(get(dc, "DeploymentCircuitBreaker", "Rollback")) != "true" ||
		scalar(get(dc, "MinimumHealthyPercent")) != "100" || scalar(get(svc, "HealthCheckGracePeriodSeconds")) == "" {
		t.Error("service: circuit breaker with rollback, rolling deploy at 100% healthy, a health check grace period")
	}

	// Autoscaling: target tracking on CPU and on the connections metric
	// the tier writes (internal/metrics).
	var cpu, conns bool
	for _, id := range resourcesOfType(root, "AWS::ApplicationAutoScaling::ScalingPolicy") {
		cfg := res(id, "Properties", "TargetTrackingScalingPolicyConfiguration")
		if scalar(get(cfg, "PredefinedMetricSpecification", "PredefinedMetricType")) == "ECSServiceAverageCPUUtilization" {
			cpu = true
		}
		m := get(cfg, "CustomizedMetricSpecification")
		if m != nil && scalar(get(m, "MetricName")) == metrics.Connections.Name && refTo(get(m, "Namespace"), "MetricsNamespace") &&
			scalar(get(m, "Statistic")) == "Average" && scalar(get(get(m, "Dimensions").Content[0], "Name")) == metrics.DimFunction {
			conns = true
		}
	}
	if !cpu || !conns {
		t.Errorf("target tracking on CPU (%v) and on %s per task (%v)", cpu, metrics.Connections.Name, conns)
	}

	// Security groups: the ALB reaches the socket port, the fanout
	// function and the other tasks the hint port, nothing else.
	ingress := map[string]string{}
	for _, r := range res("RealtimeTaskSecurityGroup", "Properties", "SecurityGroupIngress").Content {
		ingress[scalar(get(r, "FromPort"))+"/"+get(r, "SourceSecurityGroupId").Value] = scalar(get(r, "ToPort"))
		if get(r, "CidrIp") != nil {
			t.Error("task security group open to a CIDR")
		}
	}
	if len(ingress) != 2 || ingress["8080/RealtimeAlbSecurityGroup"] != "8080" || ingress["8081/FanoutSecurityGroup"] != "8081" {
		t.Errorf("task ingress %v", ingress)
	}
	peer := res("RealtimeTaskPeerIngress", "Properties")
	if !refTo(get(peer, "GroupId"), "RealtimeTaskSecurityGroup") || !refTo(get(peer, "SourceSecurityGroupId"), "RealtimeTaskSecurityGroup") || scalar(get(peer, "FromPort")) != "8081" {
		t.Error("tasks reach each other's hint port (presence)")
	}

	// Task role: item actions on the table, never Scan.
	for _, st := range get(res("RealtimeTaskRole", "Properties", "Policies").Content[0], "PolicyDocument", "Statement").Content {
		for _, a := range actionsOf(st) {
			if a == "dynamodb:Scan" || strings.HasSuffix(a, ":*") {
				t.Errorf("task role allows %s", a)
			}
		}
	}

	if o := get(root, "Outputs", "RealtimeUrl", "Value"); o == nil || !strings.Contains(yamlString(t, o), "RealtimeLoadBalancer.DNSName}/realtime") {
		t.Error("output RealtimeUrl: ws(s)://<load balancer>/realtime")
	}
}

func yamlString(t *testing.T, n *yaml.Node) string {
	t.Helper()
	b, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The fanout function: in the tier's VPC, reads only the registry, and
// its stream mapping retries, bisects, ages out and keeps what it gave up
// on; its filter passes exactly what rtfanout.HintsOf turns into hints.
func TestTemplateFanout(t *testing.T) {
	root := loadYAML(t)
	fn := get(root, "Resources", app.FanoutJob.LogicalID, "Properties")
	if v := get(fn, "VpcConfig"); v == nil || v.Tag != "!If" || v.Content[0].Value != "TierEnabled" {
		t.Error("FanoutFunction: VpcConfig when the tier is enabled")
	}
	var acts []string
	for _, p := range get(fn, "Policies").Content {
		for _, st := range get(p, "Statement").Content {
			acts = append(acts, actionsOf(st)...)
			if slices.Contains(actionsOf(st), "dynamodb:Query") {
				lead := get(st, "Condition", "ForAllValues:StringEquals", "dynamodb:LeadingKeys")
				if lead == nil || len(lead.Content) != 1 || lead.Content[0].Value != rtfanout.RegistryPK {
					t.Errorf("FanoutFunction: Query only on pk %s", rtfanout.RegistryPK)
				}
			}
		}
	}
	sort.Strings(acts)
	want := []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams", "dynamodb:Query", "sqs:SendMessage"}
	if !slices.Equal(acts, want) {
		t.Errorf("FanoutFunction actions %v, want %v", acts, want)
	}

	m := get(root, "Resources", "FanoutStreamMapping", "Properties")
	for k, ok := range map[string]bool{
		"BisectBatchOnFunctionError": scalar(get(m, "BisectBatchOnFunctionError")) == "true",
		"MaximumRetryAttempts":       scalar(get(m, "MaximumRetryAttempts")) != "" && scalar(get(m, "MaximumRetryAttempts")) != "-1",
		"MaximumRecordAgeInSeconds":  scalar(get(m, "MaximumRecordAgeInSeconds")) != "" && scalar(get(m, "MaximumRecordAgeInSeconds")) != "-1",
		"OnFailure":                  get(m, "DestinationConfig", "OnFailure", "Destination") != nil,
	} {
		if !ok {
			t.Errorf("FanoutStreamMapping: %s", k)
		}
	}
	var alarm bool
	for _, id := range resourcesOfType(root, "AWS::CloudWatch::Alarm") {
		p := get(root, "Resources", id, "Properties")
		if scalar(get(p, "MetricName")) == "IteratorAge" && refTo(get(get(p, "Dimensions").Content[0], "Value"), app.FanoutJob.LogicalID) {
			alarm = true
		}
	}
	if !alarm {
		t.Error("no IteratorAge alarm on FanoutFunction")
	}

	// The filter, evaluated on stream records the store really writes:
	// commit first items and epoch events pass, rows, outcomes, heads,
	// tickets and registry entries do not.
	var pats []map[string]any
	for _, f := range get(m, "FilterCriteria", "Filters").Content {
		var pat map[string]any
		if err := json.Unmarshal([]byte(scalar(get(f, "Pattern"))), &pat); err != nil {
			t.Fatal(err)
		}
		pats = append(pats, pat)
	}
	lp := dynamostore.PartitionPK("t#1") + "#L"
	for _, c := range []struct {
		ev, pk, sk string
		pass       bool
	}{
		{"INSERT", lp, "00000000000000000042", true},
		{"MODIFY", lp, "00000000000000000042", false},
		{"REMOVE", lp, "00000000000000000042", false},
		{"INSERT", dynamostore.PartitionPK("t#1"), dynamostore.EpochSK, true},
		{"MODIFY", dynamostore.PartitionPK("t#1"), dynamostore.EpochSK, true},
		{"REMOVE", dynamostore.PartitionPK("t#1"), dynamostore.EpochSK, false},
		{"INSERT", dynamostore.PartitionPK("t#1"), "HEAD", false},
		{"MODIFY", dynamostore.PartitionPK("t#1"), "QUEUE", false},
		{"INSERT", dynamostore.PartitionPK("t#1") + "#T#tasks", "Rrow1", false},
		{"INSERT", dynamostore.PartitionPK("t#1") + "#O#client", "Oc1", false},
		{"INSERT", rtfanout.RegistryPK, "i-1", false},
		{"MODIFY", rtfanout.RegistryPK, "i-1", false},
	} {
		pass := false
		for _, p := range pats {
			if matchPattern(p, map[string]any{"eventName": c.ev, "dynamodb": map[string]any{"Keys": map[string]any{
				"pk": map[string]any{"S": c.pk}, "sk": map[string]any{"S": c.sk}}}}) {
				pass = true
			}
		}
		if pass != c.pass {
			t.Errorf("filter on %s %s/%s: pass %v, want %v", c.ev, c.pk, c.sk, pass, c.pass)
		}
		if c.pass && rtfanout.HintsOf([]rtfanout.Record{{Event: c.ev, PK: c.pk, SK: c.sk}}) == nil {
			t.Errorf("%s %s/%s passes the filter but gives no hint", c.ev, c.pk, c.sk)
		}
	}
}

// matchPattern evaluates the subset of Lambda's filter rule syntax the
// template uses: nested objects, value lists, prefix and suffix.
func matchPattern(pat, ev map[string]any) bool {
	for k, want := range pat {
		got, ok := ev[k]
		if !ok {
			return false
		}
		switch w := want.(type) {
		case map[string]any:
			g, ok := got.(map[string]any)
			if !ok || !matchPattern(w, g) {
				return false
			}
		case []any:
			s, _ := got.(string)
			hit := false
			for _, alt := range w {
				switch a := alt.(type) {
				case string:
					hit = hit || a == s
				case map[string]any:
					if p, ok := a["prefix"].(string); ok {
						hit = hit || strings.HasPrefix(s, p)
					}
					if p, ok := a["suffix"].(string); ok {
						hit = hit || strings.HasSuffix(s, p)
					}
				}
			}
			if !hit {
				return false
			}
		}
	}
	return true
}
