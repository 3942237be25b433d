package functions

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
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

// The realtime endpoint is the tier (ECS Fargate behind an NLB): no API
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

	checkNetworkLoadBalancer(t, root)

	// Service: rolling deploy with circuit breaker, health check grace.
	svc := res("RealtimeService", "Properties")
	dc := get(svc, "DeploymentConfiguration")
	if scalar(get(dc, "DeploymentCircuitBreaker", "Enable")) != "true" || scalar(get(dc, "DeploymentCircuitBreaker", "Rollback")) != "true" ||
		scalar(get(dc, "MinimumHealthyPercent")) != "100" || scalar(get(svc, "HealthCheckGracePeriodSeconds")) == "" {
		t.Error("service: circuit breaker with rollback, rolling deploy at 100% healthy, a health check grace period")
	}

	// Capacity: on-demand by default; with RealtimeFargateSpot at least
	// one task stays on Fargate (a Spot stop never leaves no endpoint).
	if scalar(get(root, "Parameters", "RealtimeFargateSpot", "Default")) != "disabled" {
		t.Error("RealtimeFargateSpot: default disabled")
	}
	cps := map[string]bool{}
	for _, cp := range res("RealtimeCluster", "Properties", "CapacityProviders").Content {
		cps[cp.Value] = true
	}
	lt, strat := get(svc, "LaunchType"), get(svc, "CapacityProviderStrategy")
	if !cps["FARGATE"] || !cps["FARGATE_SPOT"] || lt == nil || lt.Tag != "!If" || lt.Content[0].Value != "SpotTasks" ||
		lt.Content[1].Value != "AWS::NoValue" || scalar(lt.Content[2]) != "FARGATE" ||
		strat == nil || strat.Tag != "!If" || strat.Content[0].Value != "SpotTasks" || strat.Content[2].Value != "AWS::NoValue" {
		t.Fatal("service: LaunchType FARGATE, or with SpotTasks a capacity provider strategy on the cluster's FARGATE and FARGATE_SPOT")
	}
	base := 0
	for _, item := range strat.Content[1].Content {
		if scalar(get(item, "CapacityProvider")) == "FARGATE" {
			base, _ = strconv.Atoi(scalar(get(item, "Base")))
		}
	}
	if base < 1 {
		t.Error("capacity provider strategy: Base of at least 1 on FARGATE")
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

	// Security groups: the load balancer reaches the socket port, the
	// fanout function and the other tasks the hint port, nothing else.
	ingress := map[string]string{}
	for _, r := range res("RealtimeTaskSecurityGroup", "Properties", "SecurityGroupIngress").Content {
		ingress[scalar(get(r, "FromPort"))+"/"+get(r, "SourceSecurityGroupId").Value] = scalar(get(r, "ToPort"))
		if get(r, "CidrIp") != nil || get(r, "CidrIpv6") != nil {
			t.Error("task security group open to a CIDR")
		}
	}
	if len(ingress) != 2 || ingress["8080/RealtimeLoadBalancerSecurityGroup"] != "8080" || ingress["8081/FanoutSecurityGroup"] != "8081" {
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

	// RealtimeUrl: wss:// with the certificate (TLS listener), else ws://,
	// then the load balancer's name, the tier's mount and /realtime.
	var mount *yaml.Node
	for _, e := range get(c, "Environment").Content {
		if scalar(get(e, "Name")) == "SYNC_MOUNT" {
			mount = get(e, "Value")
		}
	}
	url := get(root, "Outputs", "RealtimeUrl", "Value")
	if url == nil || url.Tag != "!Sub" || mount == nil || mount.Kind != yaml.ScalarNode {
		t.Fatal("output RealtimeUrl: !Sub [format, vars]; the tier's SYNC_MOUNT a plain value")
	}
	if f := scalar(url.Content[0]); f != "${Scheme}://${RealtimeLoadBalancer.DNSName}"+mount.Value+"/realtime" {
		t.Errorf("RealtimeUrl %q, want ws(s)://<load balancer DNS name>%s/realtime", f, mount.Value)
	}
	// The scheme per TLS mode: TestTemplateRealtimeTLSModes.
}

// isIf: n is !If [cond, then, else] with scalar branches.
func isIf(n *yaml.Node, cond, then, els string) bool {
	return n != nil && n.Tag == "!If" && len(n.Content) == 3 && n.Content[0].Value == cond &&
		scalar(n.Content[1]) == then && scalar(n.Content[2]) == els
}

// nlbTLSIdleTimeout is the fixed idle timeout of a Network Load Balancer
// TLS listener (AWS: "350 seconds and can't be modified"); TCP listeners
// take tcp.idle_timeout.seconds in 60..6000.
const nlbTLSIdleTimeout = 350 * time.Second

// tierFunction is the function dimension of the tier's own metrics
// (cmd/syncular-realtime).
const tierFunction = "realtime"

// The tier sits behind a Network Load Balancer: on 443 with either TLS
// mode, on 80 without (TestTemplateRealtimeTLSModes checks each mode);
// TCP ip targets health-checked on /healthz; draining kept and closed
// by the tasks themselves; an idle timeout above the hub's heartbeat
// interval on either listener; a security group on the load balancer;
// the unhealthy-target alarm on the NLB's metrics; no ALB anywhere.
func checkNetworkLoadBalancer(t *testing.T, root *yaml.Node) {
	t.Helper()
	res := func(id string, path ...string) *yaml.Node {
		return get(root, append([]string{"Resources", id}, path...)...)
	}
	attrsOf := func(n *yaml.Node) map[string]string {
		out := map[string]string{}
		if n == nil {
			return out
		}
		for _, a := range n.Content {
			out[scalar(get(a, "Key"))] = get(a, "Value").Value
		}
		return out
	}

	lb := res("RealtimeLoadBalancer", "Properties")
	if scalar(get(lb, "Type")) != "network" || scalar(get(lb, "Scheme")) != "internet-facing" {
		t.Errorf("RealtimeLoadBalancer: Type %q Scheme %q, want an internet-facing network load balancer", scalar(get(lb, "Type")), scalar(get(lb, "Scheme")))
	}
	if sg := get(lb, "SecurityGroups"); sg == nil || len(sg.Content) != 1 || !refTo(sg.Content[0], "RealtimeLoadBalancerSecurityGroup") {
		t.Error("RealtimeLoadBalancer: SecurityGroups [!Ref RealtimeLoadBalancerSecurityGroup] (an NLB takes them only at creation)")
	}
	if _, ok := attrsOf(get(lb, "LoadBalancerAttributes"))["idle_timeout.timeout_seconds"]; ok {
		t.Error("idle_timeout.timeout_seconds is an ALB attribute")
	}

	tg := res("RealtimeTargetGroup", "Properties")
	for k, want := range map[string]string{"TargetType": "ip", "Protocol": "TCP", "Port": "8080", "HealthCheckPath": "/healthz"} {
		if got := scalar(get(tg, k)); got != want {
			t.Errorf("RealtimeTargetGroup %s %q, want %q", k, got, want)
		}
	}
	if m := scalar(get(tg, "Matcher", "HttpCode")); m != "200" {
		t.Errorf("health check matcher %q: a draining task's 503 must count as unhealthy", m)
	}
	attrs := attrsOf(get(tg, "TargetGroupAttributes"))
	if !strings.Contains(attrs["deregistration_delay.timeout_seconds"], "${RealtimeDrainSeconds}") {
		t.Error("target group: deregistration delay from RealtimeDrainSeconds")
	}
	// SIGTERM comes after the delay and the task closes its sockets with
	// 1001; the load balancer must not reset them first.
	for k, want := range map[string]string{"deregistration_delay.connection_termination.enabled": "false", "preserve_client_ip.enabled": "false"} {
		if attrs[k] != want {
			t.Errorf("target group attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	// Keeping an unhealthy task's sockets takes both attributes: without
	// a draining interval (default 0) they are reset at once anyway.
	if d, _ := strconv.Atoi(attrs["target_health_state.unhealthy.draining_interval_seconds"]); attrs["target_health_state.unhealthy.connection_termination.enabled"] != "false" || d <= 0 {
		t.Error("target group: an unhealthy task keeps its sockets for a draining interval (connection termination off, interval > 0)")
	}

	l := res("RealtimeListener", "Properties")
	if !refTo(get(l, "LoadBalancerArn"), "RealtimeLoadBalancer") || !refTo(get(get(l, "DefaultActions").Content[0], "TargetGroupArn"), "RealtimeTargetGroup") {
		t.Error("listener: on RealtimeLoadBalancer, forwarding to RealtimeTargetGroup")
	}
	// Port, protocol and certificate per TLS mode:
	// TestTemplateRealtimeTLSModes.
	if certs := get(l, "Certificates"); certs == nil || certs.Tag != "!If" || !refTo(get(certs.Content[1].Content[0], "CertificateArn"), "RealtimeCertificateArn") {
		t.Error("listener: the RealtimeCertificateArn certificate when given")
	}
	if alpn := get(l, "AlpnPolicy"); alpn == nil || alpn.Tag != "!If" || scalar(alpn.Content[1].Content[0]) != "HTTP1Only" {
		t.Error("TLS listener: ALPN HTTP1Only (the tasks serve the upgrade over HTTP/1.1)")
	}
	var sg []*yaml.Node
	if in := res("RealtimeLoadBalancerSecurityGroup", "Properties", "SecurityGroupIngress"); in != nil {
		sg = in.Content
	}
	if len(sg) != 1 || !isIf(get(sg[0], "FromPort"), "SecureSockets", "443", "80") || !isIf(get(sg[0], "ToPort"), "SecureSockets", "443", "80") ||
		!isIf(get(l, "Port"), "SecureSockets", "443", "80") {
		t.Error("load balancer security group: the listener's port only")
	}

	// Idle sockets outlive both listeners' idle timeouts: the TCP one is
	// the parameter (within the NLB's range), the TLS one fixed.
	heartbeat := realtime.DefaultHeartbeatInterval
	la := get(l, "ListenerAttributes")
	if la == nil || la.Tag != "!If" || la.Content[0].Value != "HasCertificate" || la.Content[1].Value != "AWS::NoValue" ||
		attrsOf(la.Content[2])["tcp.idle_timeout.seconds"] != "${RealtimeIdleTimeout}" {
		t.Error("listener: tcp.idle_timeout.seconds from RealtimeIdleTimeout on the TCP listener (TLS listeners take none)")
	}
	p := get(root, "Parameters", "RealtimeIdleTimeout")
	minV, _ := strconv.Atoi(scalar(get(p, "MinValue")))
	maxV, _ := strconv.Atoi(scalar(get(p, "MaxValue")))
	def, _ := strconv.Atoi(scalar(get(p, "Default")))
	if minV < 60 || maxV > 6000 || def < minV || def > maxV {
		t.Errorf("RealtimeIdleTimeout %d..%d (default %d), outside the NLB's 60..6000", minV, maxV, def)
	}
	if time.Duration(minV)*time.Second <= heartbeat || nlbTLSIdleTimeout <= heartbeat {
		t.Errorf("idle timeouts (TCP at least %d s, TLS %v) must exceed the heartbeat interval %v", minV, nlbTLSIdleTimeout, heartbeat)
	}

	// The unhealthy-target alarm reads the NLB's namespace for this target
	// group and load balancer.
	al := res("RealtimeUnhealthyTasksAlarm", "Properties")
	dims := map[string]string{}
	for _, d := range get(al, "Dimensions").Content {
		dims[scalar(get(d, "Name"))] = get(d, "Value").Tag + " " + get(d, "Value").Value
	}
	if scalar(get(al, "Namespace")) != "AWS/NetworkELB" || scalar(get(al, "MetricName")) != "UnHealthyHostCount" ||
		dims["TargetGroup"] != "!GetAtt RealtimeTargetGroup.TargetGroupFullName" || dims["LoadBalancer"] != "!GetAtt RealtimeLoadBalancer.LoadBalancerFullName" {
		t.Errorf("RealtimeUnhealthyTasksAlarm: AWS/NetworkELB UnHealthyHostCount of the tier's target group, got %s %s %v",
			scalar(get(al, "Namespace")), scalar(get(al, "MetricName")), dims)
	}

	// Nothing of an Application Load Balancer is left: no ALB metric, no
	// RequestCountPerTarget scaling (an NLB counts no requests).
	b, err := yaml.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, alb := range []string{"AWS/ApplicationELB", "RequestCountPerTarget"} {
		if strings.Contains(string(b), alb) {
			t.Errorf("template still mentions %s", alb)
		}
	}
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
