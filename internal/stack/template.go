package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// template is what the stack reads from template.yaml, so the local shape
// follows the deployed one as the template changes: each function's
// environment and timeout, the table's stream view and the stream
// mapping's batch size, retries, bisect, record age and filters.
type template struct {
	root *yaml.Node
}

func loadTemplate(repo string) (*template, error) {
	b, err := os.ReadFile(filepath.Join(repo, "template.yaml"))
	if err != nil {
		return nil, fmt.Errorf("stack: read template: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("stack: parse template.yaml: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, fmt.Errorf("stack: template.yaml is empty")
	}
	return &template{root: doc.Content[0]}, nil
}

// node walks mapping keys; nil when a key is missing.
func node(n *yaml.Node, path ...string) *yaml.Node {
	for _, k := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// literal is a scalar's value when it is a plain literal (not !Ref, !Sub
// or another intrinsic, which only AWS resolves).
func literal(n *yaml.Node) (string, bool) {
	if n == nil || n.Kind != yaml.ScalarNode || (strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!")) {
		return "", false
	}
	return n.Value, true
}

// FunctionEnv is the function's environment as the template declares it
// (Globals, then the function's own variables): literal values only, and
// every intrinsic-valued variable set to "" so the caller fills it in.
func (t *template) FunctionEnv(logicalID string) map[string]string {
	env := map[string]string{}
	for _, vars := range []*yaml.Node{
		node(t.root, "Globals", "Function", "Environment", "Variables"),
		node(t.root, "Resources", logicalID, "Properties", "Environment", "Variables"),
	} {
		if vars == nil || vars.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(vars.Content); i += 2 {
			env[vars.Content[i].Value] = t.value(vars.Content[i+1])
		}
	}
	return env
}

// value is a literal, or a !Ref of a parameter resolved to its Default;
// "" for any other intrinsic.
func (t *template) value(n *yaml.Node) string {
	if v, ok := literal(n); ok {
		return v
	}
	if n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!Ref" {
		if d, ok := literal(node(t.root, "Parameters", n.Value, "Default")); ok {
			return d
		}
	}
	return ""
}

// TaskEnv is the environment of the first container of the template's
// first ECS task definition (the realtime tier), resolved like
// FunctionEnv; nil when the template has none.
func (t *template) TaskEnv() map[string]string {
	res := node(t.root, "Resources")
	if res == nil {
		return nil
	}
	for i := 0; i+1 < len(res.Content); i += 2 {
		r := res.Content[i+1]
		if v, _ := literal(node(r, "Type")); v != "AWS::ECS::TaskDefinition" {
			continue
		}
		defs := node(r, "Properties", "ContainerDefinitions")
		if defs == nil || defs.Kind != yaml.SequenceNode || len(defs.Content) == 0 {
			return nil
		}
		env := map[string]string{}
		if l := node(defs.Content[0], "Environment"); l != nil {
			for _, e := range l.Content {
				if name, ok := literal(node(e, "Name")); ok {
					env[name] = t.value(node(e, "Value"))
				}
			}
		}
		return env
	}
	return nil
}

// cors is an HTTP API's CorsConfiguration.
type cors struct {
	Origins, Methods, Headers, Expose []string
	MaxAge                            string
}

// HTTPAPICors reads the first AWS::Serverless::HttpApi's CorsConfiguration
// (a CommaDelimitedList parameter resolved to its default); nil when none.
func (t *template) HTTPAPICors() *cors {
	res := node(t.root, "Resources")
	if res == nil {
		return nil
	}
	for i := 0; i+1 < len(res.Content); i += 2 {
		r := res.Content[i+1]
		if v, _ := literal(node(r, "Type")); v != "AWS::Serverless::HttpApi" {
			continue
		}
		c := node(r, "Properties", "CorsConfiguration")
		if c == nil {
			return nil
		}
		list := func(key string) []string {
			n := node(c, key)
			if n == nil {
				return nil
			}
			if n.Kind == yaml.SequenceNode {
				var out []string
				for _, e := range n.Content {
					out = append(out, t.value(e))
				}
				return out
			}
			return strings.Split(t.value(n), ",")
		}
		maxAge, _ := literal(node(c, "MaxAge"))
		return &cors{Origins: list("AllowOrigins"), Methods: list("AllowMethods"), Headers: list("AllowHeaders"), Expose: list("ExposeHeaders"), MaxAge: maxAge}
	}
	return nil
}

// FunctionTimeout is the function's Timeout in seconds (its own, else
// Globals'), 3 when neither sets one (Lambda's default).
func (t *template) FunctionTimeout(logicalID string) int {
	for _, n := range []*yaml.Node{
		node(t.root, "Resources", logicalID, "Properties", "Timeout"),
		node(t.root, "Globals", "Function", "Timeout"),
	} {
		if v, ok := literal(n); ok {
			if s, err := strconv.Atoi(v); err == nil {
				return s
			}
		}
	}
	return 3
}

// StreamViewType is SyncTable's StreamSpecification view ("" = no stream).
func (t *template) StreamViewType() string {
	v, _ := literal(node(t.root, "Resources", "SyncTable", "Properties", "StreamSpecification", "StreamViewType"))
	return v
}

// mapping is an AWS::Lambda::EventSourceMapping's stream settings.
type mapping struct {
	ID             string
	BatchSize      int
	MaxRetries     int // -1 = until the record expires
	MaxRecordAge   int // seconds; -1 = none
	Bisect         bool
	ReportFailures bool // FunctionResponseTypes: ReportBatchItemFailures
	Filters        []map[string]any
	OnFailure      bool // a DestinationConfig.OnFailure is declared
}

// StreamMapping returns the first event source mapping of the template,
// with Lambda's defaults for what it leaves out.
func (t *template) StreamMapping() (*mapping, error) {
	res := node(t.root, "Resources")
	if res == nil {
		return nil, fmt.Errorf("stack: template.yaml has no Resources")
	}
	for i := 0; i+1 < len(res.Content); i += 2 {
		r := res.Content[i+1]
		if v, _ := literal(node(r, "Type")); v != "AWS::Lambda::EventSourceMapping" {
			continue
		}
		p := node(r, "Properties")
		m := &mapping{ID: res.Content[i].Value, BatchSize: 100, MaxRetries: -1, MaxRecordAge: -1}
		intOf := func(key string, dst *int) error {
			if v, ok := literal(node(p, key)); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					return fmt.Errorf("stack: %s.%s: %w", m.ID, key, err)
				}
				*dst = n
			}
			return nil
		}
		for k, dst := range map[string]*int{"BatchSize": &m.BatchSize, "MaximumRetryAttempts": &m.MaxRetries, "MaximumRecordAgeInSeconds": &m.MaxRecordAge} {
			if err := intOf(k, dst); err != nil {
				return nil, err
			}
		}
		if v, _ := literal(node(p, "BisectBatchOnFunctionError")); v == "true" {
			m.Bisect = true
		}
		if l := node(p, "FunctionResponseTypes"); l != nil {
			for _, e := range l.Content {
				if e.Value == "ReportBatchItemFailures" {
					m.ReportFailures = true
				}
			}
		}
		m.OnFailure = node(p, "DestinationConfig", "OnFailure") != nil
		if fs := node(p, "FilterCriteria", "Filters"); fs != nil {
			for _, f := range fs.Content {
				pat, ok := literal(node(f, "Pattern"))
				if !ok {
					return nil, fmt.Errorf("stack: %s: a filter pattern that is not a literal string", m.ID)
				}
				var obj map[string]any
				if err := json.Unmarshal([]byte(pat), &obj); err != nil {
					return nil, fmt.Errorf("stack: %s: filter pattern %s: %w", m.ID, pat, err)
				}
				m.Filters = append(m.Filters, obj)
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("stack: template.yaml declares no AWS::Lambda::EventSourceMapping")
}

// FunctionOf is the logical id of the function a mapping invokes
// (FunctionName: !Sub "${X}:live" or !Ref X).
func (t *template) FunctionOf(mappingID string) string {
	n := node(t.root, "Resources", mappingID, "Properties", "FunctionName")
	if n == nil {
		return ""
	}
	v := n.Value
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 { // long form {Ref: X} / {Fn::Sub: ...}
		v = n.Content[1].Value
	}
	if len(v) > 3 && v[:2] == "${" {
		for i := 2; i < len(v); i++ {
			if v[i] == '}' || v[i] == '.' {
				return v[2:i]
			}
		}
	}
	return v
}
