package app

import "testing"

func TestGCSettings(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	limit, pct, ok := gcSettings(env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512"))
	if !ok || limit != 384<<20 || pct != lambdaGCPercent {
		t.Fatalf("512 MB function: limit %d percent %d ok %v", limit, pct, ok)
	}
	for name, e := range map[string]func(string) string{
		"GOGC set":       env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512", "GOGC", "100"),
		"GOMEMLIMIT set": env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512", "GOMEMLIMIT", "200MiB"),
		"not Lambda":     env(),
		"garbage size":   env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "lots"),
		"tiny size":      env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "64"),
	} {
		if _, _, ok := gcSettings(e); ok {
			t.Errorf("%s: settings applied", name)
		}
	}
}
