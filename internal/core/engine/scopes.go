package engine

import (
	"slices"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// effectiveScopes computes requested ∩ allowed per §3.2 rule 4 and
// reports whether the subscription stays active under rule 5.
// requested keys were validated against the table beforehand.
//
// The returned values may alias requested's (when every requested value
// is allowed and they are already sorted and distinct, the usual
// request): neither is ever modified, both live as long as the request.
func effectiveScopes(requested wire.ScopeMap, allowed ScopeMap) (ScopeMap, bool) {
	eff := make(ScopeMap, len(requested))
	for _, r := range requested {
		av, ok := allowed[r.Key]
		if !ok {
			return nil, false // rule 5: a requested key missing from effective
		}
		var vals []string
		if slices.Contains(av, "*") || allAllowed(r.Values, av) {
			vals = dedupSorted(r.Values)
		} else {
			for _, v := range r.Values {
				if slices.Contains(av, v) {
					vals = append(vals, v)
				}
			}
			vals = dedupSorted(vals)
		}
		if len(vals) == 0 {
			return nil, false // empty intersection excludes the key → revoked
		}
		eff[r.Key] = vals
	}
	if len(eff) == 0 {
		return nil, false // rule 5: effective is empty
	}
	return eff, true
}

// allAllowed reports whether every value of vals is one of av.
func allAllowed(vals, av []string) bool {
	for _, v := range vals {
		if !slices.Contains(av, v) {
			return false
		}
	}
	return true
}

// dedupSorted returns v sorted and without repeats: v itself when it
// already is (no copy; the result is only read), else a sorted copy.
func dedupSorted(v []string) []string {
	if sortedDistinct(v) {
		return v
	}
	out := slices.Clone(v)
	slices.Sort(out)
	return slices.Compact(out)
}

// matchesScopes is the §3.2 read rule: for every effective key, the
// stored value is one of the effective values. A stored map lacking a key
// never matches (fail closed).
func matchesScopes(stored wire.StoredScopes, eff ScopeMap) bool {
	for k, vals := range eff {
		v, ok := storedValue(stored, k)
		if !ok || !containsSorted(vals, v) {
			return false
		}
	}
	return true
}

func storedValue(s wire.StoredScopes, key string) (string, bool) {
	for _, e := range s {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

func containsSorted(sorted []string, v string) bool {
	_, ok := slices.BinarySearch(sorted, v)
	return ok
}

// authorizeRow is §3.4 steps 2–3 on a row's stored scopes: every declared
// variable must be present, non-empty and allowed (or allowed '*').
func authorizeRow(t *schema.Table, scopes wire.StoredScopes, allowed ScopeMap) bool {
	for _, p := range t.Scopes {
		v, ok := storedValue(scopes, p.Variable)
		if !ok || v == "" {
			return false
		}
		av := allowed[p.Variable]
		if !slices.Contains(av, "*") && !slices.Contains(av, v) {
			return false
		}
	}
	return len(t.Scopes) > 0
}

// extractScopes builds the stored scopes of a row from its values (§3.1):
// variable → the scope column's value rendered as text. ok is false when a
// scope column is NULL or empty (§3.4: missing or empty ⇒ deny).
func extractScopes(t *schema.Table, vals []rowcodec.Value) (wire.StoredScopes, bool) {
	out := make(wire.StoredScopes, 0, len(t.Scopes))
	for _, p := range t.Scopes {
		v := vals[p.ColumnIndex]
		if v.Null {
			return nil, false
		}
		s := valueText(t.Columns[p.ColumnIndex].Type, v)
		if s == "" {
			return nil, false
		}
		out = append(out, wire.StoredScope{Key: p.Variable, Value: s})
	}
	slices.SortFunc(out, func(a, b wire.StoredScope) int { return canonjson.CompareUTF16(a.Key, b.Key) })
	return out, true
}

// toWireScopes renders an effective map for SUB_START (the encoder sorts).
func toWireScopes(m ScopeMap) wire.ScopeMap {
	out := make(wire.ScopeMap, 0, len(m))
	for k, v := range m {
		out = append(out, wire.ScopeEntry{Key: k, Values: v})
	}
	slices.SortFunc(out, func(a, b wire.ScopeEntry) int { return canonjson.CompareUTF16(a.Key, b.Key) })
	return out
}

func sortedDistinct(v []string) bool {
	for i := 1; i < len(v); i++ {
		if v[i-1] >= v[i] {
			return false
		}
	}
	return true
}

// wireEffective is toWireScopes for an effective map computed from
// requested: when eff has requested's keys with the same values (every
// requested value allowed, the usual request), requested already is the
// SUB_START form (the decoder checked its canonical key order) and is
// returned as is; it is only read.
func wireEffective(requested wire.ScopeMap, eff ScopeMap) wire.ScopeMap {
	if len(requested) != len(eff) || !slices.IsSortedFunc(requested, func(a, b wire.ScopeEntry) int { return canonjson.CompareUTF16(a.Key, b.Key) }) {
		return toWireScopes(eff)
	}
	for _, r := range requested {
		v, ok := eff[r.Key]
		if !ok || len(v) != len(r.Values) || (len(v) > 0 && &v[0] != &r.Values[0]) {
			return toWireScopes(eff)
		}
	}
	return requested
}
