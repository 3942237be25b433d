package engine

import (
	"context"
	"errors"
	"testing"
)

// The pause before a retry, observed through a context that is already
// done: a pause that would sleep reports the context's error, one that
// does not returns nil at once. A store deciding commits in process
// retries its first localRetries lost races without a pause, any other
// store backs off from the first.
func TestRetryWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for attempt := 1; attempt <= localRetries; attempt++ {
		if err := retryWait(ctx, attempt, true); err != nil {
			t.Fatalf("local store, attempt %d: paused (%v)", attempt, err)
		}
		if err := retryWait(ctx, attempt, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("remote store, attempt %d: no backoff (%v)", attempt, err)
		}
	}
	if err := retryWait(ctx, localRetries+1, true); !errors.Is(err, context.Canceled) {
		t.Fatalf("local store past %d lost races: no backoff (%v)", localRetries, err)
	}
}
