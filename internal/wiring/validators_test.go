package wiring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
)

// The validators document is optional by default, required once named,
// and compiled against the schema at startup (SYNC_VALIDATORS_PATH).
func TestLoadValidators(t *testing.T) {
	sch, err := schema.Parse([]byte(enginetest.TodoSchema))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"validators":[{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":200,"code":"app.title_too_long"}}]}`)
	h, err := LoadValidators(&config.Config{ValidatorsPath: good}, sch)
	if err != nil || h.Row("tasks") == nil || h.Commit != nil {
		t.Fatalf("good document: %+v %v", h, err)
	}
	bad := write("bad.json", `{"validators":[{"table":"tasks","rule":{"kind":"maxLength","column":"summary","max":200,"code":"app.x"}}]}`)
	if _, err := LoadValidators(&config.Config{ValidatorsPath: bad}, sch); err == nil || !strings.Contains(err.Error(), "summary") {
		t.Fatalf("a rule on an unknown column loaded: %v", err)
	}
	if _, err := LoadValidators(&config.Config{ValidatorsPath: filepath.Join(dir, "missing.json")}, sch); err == nil {
		t.Fatal("a named, missing document loaded")
	}
	// Unset: validators.json beside the test binary, which is absent,
	// and a schema file without rules.
	plain := write("schema.json", enginetest.TodoSchema)
	if h, err := LoadValidators(&config.Config{SchemaPath: plain}, sch); h != nil || err != nil {
		t.Fatalf("no document: %+v %v", h, err)
	}
	// The rules may live in the schema file itself, but not in both.
	withRules := write("schema-rules.json", strings.Replace(enginetest.TodoSchema, `"version": 1,`,
		`"version": 1, "commitValidators": [{"kind": "requireSiblingWhen", "table": "tasks", "column": "done",
		  "equals": true, "siblingRowIdSuffix": "-audit", "code": "app.audit"}],`, 1))
	if _, err := schema.ReadFile(withRules); err != nil {
		t.Fatalf("the schema parser refuses the rules' members: %v", err)
	}
	h, err = LoadValidators(&config.Config{SchemaPath: withRules}, sch)
	if err != nil || h.Commit == nil || h.Rows != nil {
		t.Fatalf("rules in the schema file: %+v %v", h, err)
	}
	if _, err := LoadValidators(&config.Config{SchemaPath: withRules, ValidatorsPath: good}, sch); err == nil {
		t.Fatal("rules in both the schema file and a document loaded")
	}
}
