package app

import (
	"runtime/debug"
	"strconv"
)

// Lambda bills the duration of each invocation, and a warm function's
// live heap is small (a handler, SDK clients, pools: a few MB) next to the
// memory it is given. With the Go default (GOGC=100) the collector then
// runs every few MB allocated — every few dozen requests — and its marking
// is billed time. Given the memory size, the collector can instead run
// rarely and be bounded by a soft memory limit well below the function's
// memory, so it works harder only if the heap ever approaches that.
//
// gcSettings returns the memory limit (bytes) and GC percent to apply, or
// ok false when the operator set GOGC or GOMEMLIMIT (their settings win)
// or the process is not a Lambda function.
func gcSettings(getenv func(string) string) (limit int64, percent int, ok bool) {
	if OperatorSetGC(getenv) {
		return 0, 0, false
	}
	mb, err := strconv.ParseInt(getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"), 10, 64)
	if err != nil || mb < 128 {
		return 0, 0, false
	}
	// Three quarters of the function's memory for the Go heap leaves the
	// rest to stacks, the runtime and the binary itself.
	return mb << 20 * 3 / 4, lambdaGCPercent, true
}

// OperatorSetGC reports whether the environment sets GOGC or GOMEMLIMIT:
// then the Go runtime applies them and no process of this module tunes
// its collector over them (functions and the local runner alike).
func OperatorSetGC(getenv func(string) string) bool {
	return getenv("GOGC") != "" || getenv("GOMEMLIMIT") != ""
}

// lambdaGCPercent lets the heap grow to five times the live heap between
// collections (capped by the memory limit).
const lambdaGCPercent = 400

// tuneGC applies gcSettings; it returns what it set, for the init log line.
func tuneGC(getenv func(string) string) (limit int64, percent int, ok bool) {
	limit, percent, ok = gcSettings(getenv)
	if ok {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(percent)
	}
	return limit, percent, ok
}
