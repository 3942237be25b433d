package rttier

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The tier is a long-running service: it builds the engine through
// internal/wiring and links nothing of the Lambda runtime.
func TestNoLambdaRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 || !slices.Contains(deps, "github.com/skyfold/syncular-lambda/internal/wiring") {
		t.Fatalf("implausible dependency list (%d packages)", len(deps))
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/aws/aws-lambda-go") || d == "github.com/skyfold/syncular-lambda/internal/app" {
			t.Errorf("the tier links %s", d)
		}
	}
}
