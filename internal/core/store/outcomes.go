package store

import "time"

// DefaultOutcomeWindow is how long a push outcome answers a replay of its
// idempotency key (§2.3): 30 days, the §4.6 age force limit. A stock
// client keeps an unacknowledged commit in its outbox and sends it again
// on every sync round until a result arrives (backoff capped at 30 s), so
// a retry comes later than the window only when the device stayed away
// for 30 days right after the lost answer; by then its cursor may be
// force-expired as well and it bootstraps again. docs/OPERATIONS.md
// ("Idempotency window") says what such a late retry gets.
const DefaultOutcomeWindow = 30 * 24 * time.Hour

// OutcomeExpiry returns the Unix second from which an outcome recorded at
// recordedAtMs is treated as absent, for a window (a store's configured
// idempotency window): the first whole second at or after
// recordedAtMs + window. ok is false when the outcome never expires: a
// window ≤ 0 (expiry off) or an outcome without a recording time.
//
// Both stores derive expiry from this one function, so memstore and
// dynamostore honour the same window to the second, and an outcome is
// expired at nowMs exactly when OutcomeExpired says so.
func OutcomeExpiry(recordedAtMs int64, window time.Duration) (sec int64, ok bool) {
	if window <= 0 || recordedAtMs <= 0 {
		return 0, false
	}
	end := recordedAtMs + window.Milliseconds()
	return (end + 999) / 1000, true
}

// OutcomeExpired reports whether an outcome whose expiry second is sec
// (OutcomeExpiry) is past its window at nowMs.
func OutcomeExpired(sec, nowMs int64) bool { return sec <= nowMs/1000 }
