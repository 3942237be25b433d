package dynamostore

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Push outcomes expire after the idempotency window (Options.OutcomeTTL;
// the functions pass SYNC_OUTCOME_TTL, default store.DefaultOutcomeWindow).
// An outcome item
// carries its expiry in the table's TTL attribute, written with the item
// itself (no extra write), so DynamoDB deletes it at no write cost some
// time after it expires. TTL deletion is lazy (typically within days),
// so the store itself treats an expired item as absent, by the engine's
// clock like every time-dependent store rule:
//
//   - GetOutcome returns nil for it at the caller's nowMs;
//   - the outcome put of Commit and PutRejection is conditioned on
//     "absent or expired by the new outcome's RecordedAtMs"
//     (outcomeAbsent), so a key whose outcome expired is recorded again,
//     and ErrOutcomeExists keeps meaning "a live outcome exists".
//
// Outcome items written before expiry existed have no TTL attribute: they
// never expire and keep answering replays.

// outcomeTTL is the one place an outcome's TTL attribute is computed: the
// Unix second its window ends (store.OutcomeExpiry). ok is false when the
// outcome never expires (expiry off, or no recording time). Every path
// that writes an outcome item goes through outcomeItem, which calls it.
func (s *Store) outcomeTTL(recordedAtMs int64) (int64, bool) {
	return store.OutcomeExpiry(recordedAtMs, s.outcomeWindow)
}

// outcomeLive reports whether an outcome item read at nowMs is within its
// window: true without a TTL attribute.
func outcomeLive(item map[string]types.AttributeValue, nowMs int64) bool {
	sec, ok := getN(item, TTLAttribute)
	return !ok || !store.OutcomeExpired(sec, nowMs)
}

// outcomeAbsent is the condition of an outcome put (§2.3 put-if-absent):
// no item under the key, or one whose window ended by nowMs (the new
// outcome's RecordedAtMs; store.OutcomeExpired). It names the TTL
// attribute #ttl (TTL is a reserved word) and the bound :ttlnow.
func outcomeAbsent(nowMs int64) (cond string, names map[string]string, vals map[string]types.AttributeValue) {
	return "attribute_not_exists(pk) OR #ttl <= :ttlnow",
		map[string]string{"#ttl": TTLAttribute},
		map[string]types.AttributeValue{":ttlnow": N(nowMs / 1000)}
}
