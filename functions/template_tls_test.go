package functions

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// noValue is AWS::NoValue in an evaluated template: the property or list
// item disappears.
type noValueT struct{}

var noValue = noValueT{}

// cfnEval evaluates the template's intrinsic functions for one set of
// parameter values, as CloudFormation does at deploy time: conditions
// (!Equals, !Not, !And, !Or, !Condition), !If and !Ref of parameters.
// Resource references stay "ref:<id>"; other functions stay
// {"Fn::<name>": evaluated arguments}.
type cfnEval struct {
	t      *testing.T
	root   *yaml.Node
	params map[string]string
}

func newCfnEval(t *testing.T, root *yaml.Node, overrides map[string]string) *cfnEval {
	t.Helper()
	params := map[string]string{}
	for _, p := range keys(get(root, "Parameters")) {
		if d := get(root, "Parameters", p, "Default"); d != nil {
			params[p] = d.Value
		}
	}
	for k, v := range overrides {
		if _, ok := params[k]; !ok {
			t.Fatalf("the template has no parameter %s", k)
		}
		params[k] = v
	}
	return &cfnEval{t: t, root: root, params: params}
}

func (e *cfnEval) cond(name string) bool {
	n := get(e.root, "Conditions", name)
	if n == nil {
		e.t.Fatalf("no condition %s", name)
	}
	return e.boolean(n)
}

func (e *cfnEval) boolean(n *yaml.Node) bool {
	switch n.Tag {
	case "!Equals":
		return e.value(n.Content[0]) == e.value(n.Content[1])
	case "!Not":
		return !e.boolean(n.Content[0])
	case "!And", "!Or":
		and := n.Tag == "!And"
		for _, c := range n.Content {
			if e.boolean(c) != and {
				return !and
			}
		}
		return and
	case "!Condition":
		return e.cond(n.Value)
	}
	e.t.Fatalf("condition function %s not evaluated here", n.Tag)
	return false
}

func (e *cfnEval) value(n *yaml.Node) any {
	switch n.Tag {
	case "!Ref":
		if n.Value == "AWS::NoValue" {
			return noValue
		}
		if v, ok := e.params[n.Value]; ok {
			return v
		}
		return "ref:" + n.Value
	case "!If":
		if e.cond(n.Content[0].Value) {
			return e.value(n.Content[1])
		}
		return e.value(n.Content[2])
	}
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if x := e.value(n.Content[i+1]); x != noValue {
				m[n.Content[i].Value] = x
			}
		}
		v = m
	case yaml.SequenceNode:
		l := []any{}
		for _, c := range n.Content {
			if x := e.value(c); x != noValue {
				l = append(l, x)
			}
		}
		v = l
	default:
		v = n.Value
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return map[string]any{"Fn::" + strings.TrimPrefix(n.Tag, "!"): v}
	}
	return v
}

// property is the evaluated value of Resources.<id>.Properties.<path>.
func (e *cfnEval) property(id string, path ...string) any {
	return e.value(get(e.root, append([]string{"Resources", id, "Properties"}, path...)...))
}

// The tier's three TLS modes, evaluated as CloudFormation would deploy
// them. TLS in the tasks (RealtimeTlsSecretArn): a TCP listener on 443
// (NLCU at 100,000 connections), an HTTPS health check, the secret's ARN
// in SYNC_TLS_CERT_REF and GetSecretValue on that secret alone. TLS at
// the load balancer (RealtimeCertificateArn): the TLS listener with that
// certificate, plain HTTP to the tasks. Neither: ws:// on 80. Both at
// once is refused by a rule.
func TestTemplateRealtimeTLSModes(t *testing.T) {
	root := loadYAML(t)
	const (
		certArn   = "arn:aws:acm:eu-west-1:123456789012:certificate/0f5e8a6c-1111-2222-3333-444455556666"
		secretArn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:syncular/realtime-tls-AbCdEf"
	)
	for _, m := range []struct {
		name          string
		params        map[string]string
		port, proto   string
		health        string
		scheme, ref   string
		nlbCert, idle bool
	}{
		{"plain", nil, "80", "TCP", "HTTP", "ws", "", false, true},
		{"TLS at the load balancer", map[string]string{"RealtimeCertificateArn": certArn}, "443", "TLS", "HTTP", "wss", "", true, false},
		{"TLS in the tasks", map[string]string{"RealtimeTlsSecretArn": secretArn}, "443", "TCP", "HTTPS", "wss", secretArn, false, true},
	} {
		t.Run(m.name, func(t *testing.T) {
			e := newCfnEval(t, root, m.params)
			if port, proto := e.property("RealtimeListener", "Port"), e.property("RealtimeListener", "Protocol"); port != m.port || proto != m.proto {
				t.Errorf("listener %v on %v, want %s on %s", proto, port, m.proto, m.port)
			}
			certs, hasCerts := e.property("RealtimeListener").(map[string]any)["Certificates"]
			_, hasPolicy := e.property("RealtimeListener").(map[string]any)["SslPolicy"]
			if hasCerts != m.nlbCert || hasPolicy != m.nlbCert {
				t.Errorf("listener certificates %v / TLS policy %v, want both %v", certs, hasPolicy, m.nlbCert)
			}
			if m.nlbCert {
				if c := certs.([]any); len(c) != 1 || c[0].(map[string]any)["CertificateArn"] != certArn {
					t.Errorf("listener certificates %v, want %s", certs, certArn)
				}
			}
			// Every TCP listener carries the idle timeout (a TLS one's is fixed).
			attrs, _ := e.property("RealtimeListener", "ListenerAttributes").([]any)
			if (len(attrs) == 1) != m.idle {
				t.Errorf("listener attributes %v, want tcp.idle_timeout.seconds: %v", attrs, m.idle)
			}
			in := e.property("RealtimeLoadBalancerSecurityGroup", "SecurityGroupIngress").([]any)
			if r := in[0].(map[string]any); len(in) != 1 || r["FromPort"] != m.port || r["ToPort"] != m.port {
				t.Errorf("load balancer ingress %v, want port %s only", in, m.port)
			}
			// Plain TCP to the tasks in every mode: the load balancer never
			// re-encrypts, and in the TLS-in-task mode never decrypts.
			if p := e.property("RealtimeTargetGroup", "Protocol"); p != "TCP" {
				t.Errorf("target group protocol %v", p)
			}
			if hc := e.property("RealtimeTargetGroup", "HealthCheckProtocol"); hc != m.health || e.property("RealtimeTargetGroup", "HealthCheckPath") != "/healthz" {
				t.Errorf("health check %v, want %s /healthz", hc, m.health)
			}
			var ref any = "(unset)"
			for _, v := range e.property("RealtimeTaskDefinition", "ContainerDefinitions").([]any)[0].(map[string]any)["Environment"].([]any) {
				if kv := v.(map[string]any); kv["Name"] == "SYNC_TLS_CERT_REF" {
					ref = kv["Value"]
				}
			}
			if ref != m.ref {
				t.Errorf("SYNC_TLS_CERT_REF %v, want %q", ref, m.ref)
			}
			// The task role reads the one secret, only in that mode; no
			// other statement names Secrets Manager.
			var secretStmts []map[string]any
			for _, st := range e.property("RealtimeTaskRole", "Policies").([]any)[0].(map[string]any)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
				if s := st.(map[string]any); strings.Contains(strings.Join(anyStrings(s["Action"]), ","), "secretsmanager:") {
					secretStmts = append(secretStmts, s)
				}
			}
			if m.ref == "" && len(secretStmts) != 0 {
				t.Errorf("task role reads secrets without RealtimeTlsSecretArn: %v", secretStmts)
			}
			if m.ref != "" && (len(secretStmts) != 1 || !slices.Equal(anyStrings(secretStmts[0]["Action"]), []string{"secretsmanager:GetSecretValue"}) ||
				secretStmts[0]["Resource"] != m.ref) {
				t.Errorf("task role secret statements %v, want GetSecretValue on %s only", secretStmts, m.ref)
			}
			url := e.value(get(root, "Outputs", "RealtimeUrl", "Value")).(map[string]any)["Fn::Sub"].([]any)
			if sch := url[1].(map[string]any)["Scheme"]; sch != m.scheme {
				t.Errorf("RealtimeUrl scheme %v, want %s", sch, m.scheme)
			}
		})
	}

	// One mode at a time; the secret parameter takes a Secrets Manager
	// ARN (or nothing).
	var rule *yaml.Node
	for _, r := range keys(get(root, "Rules")) {
		for _, a := range get(root, "Rules", r, "Assertions").Content {
			if strings.Contains(scalar(get(a, "AssertDescription")), "RealtimeTlsSecretArn") {
				rule = get(a, "Assert")
			}
		}
	}
	if rule == nil {
		t.Fatal("no rule on RealtimeCertificateArn with RealtimeTlsSecretArn")
	}
	both := newCfnEval(t, root, map[string]string{"RealtimeCertificateArn": certArn, "RealtimeTlsSecretArn": secretArn})
	one := newCfnEval(t, root, map[string]string{"RealtimeTlsSecretArn": secretArn})
	if both.boolean(rule) || !one.boolean(rule) {
		t.Error("the rule must refuse both TLS parameters at once and allow one")
	}
	pat := regexp.MustCompile(scalar(get(root, "Parameters", "RealtimeTlsSecretArn", "AllowedPattern")))
	if !pat.MatchString(secretArn) || !pat.MatchString("") || pat.MatchString(certArn) || pat.MatchString("/ssm/parameter") {
		t.Errorf("RealtimeTlsSecretArn AllowedPattern %s", pat)
	}
}

// anyStrings is an evaluated Action (a string or a list) as strings.
func anyStrings(v any) []string {
	switch a := v.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}
