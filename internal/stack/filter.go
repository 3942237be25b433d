package stack

import (
	"encoding/json"
	"strings"
)

// matchesAny reports whether a stream record (as the JSON object Lambda
// filters: eventName, dynamodb.Keys, …) passes the mapping's filters.
// No filters pass everything; several are ORed, as Lambda does.
func matchesAny(filters []map[string]any, rec map[string]any) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if matchObject(f, rec) {
			return true
		}
	}
	return false
}

// matchObject applies one pattern object: every key must match (AND).
// A nested object descends; an array lists alternatives (OR) of
// literals or of the content filters prefix, suffix, anything-but,
// exists and equals-ignore-case (Lambda event filtering syntax).
func matchObject(pat map[string]any, v map[string]any) bool {
	for k, p := range pat {
		val, present := v[k]
		switch p := p.(type) {
		case map[string]any:
			sub, ok := val.(map[string]any)
			if !ok || !matchObject(p, sub) {
				return false
			}
		case []any:
			if !matchAlternatives(p, val, present) {
				return false
			}
		default:
			return false // a pattern leaf must be an array
		}
	}
	return true
}

func matchAlternatives(alts []any, val any, present bool) bool {
	for _, a := range alts {
		if cond, ok := a.(map[string]any); ok {
			if matchCondition(cond, val, present) {
				return true
			}
			continue
		}
		if present && equalJSON(a, val) {
			return true
		}
	}
	return false
}

func matchCondition(cond map[string]any, val any, present bool) bool {
	for op, arg := range cond {
		s, isStr := val.(string)
		switch op {
		case "exists":
			want, _ := arg.(bool)
			if present != want {
				return false
			}
		case "prefix":
			p, _ := arg.(string)
			if !isStr || !strings.HasPrefix(s, p) {
				return false
			}
		case "suffix":
			p, _ := arg.(string)
			if !isStr || !strings.HasSuffix(s, p) {
				return false
			}
		case "equals-ignore-case":
			p, _ := arg.(string)
			if !isStr || !strings.EqualFold(s, p) {
				return false
			}
		case "anything-but":
			if !present {
				return false
			}
			list, ok := arg.([]any)
			if !ok {
				if sub, ok := arg.(map[string]any); ok {
					if matchCondition(sub, val, present) {
						return false
					}
					continue
				}
				list = []any{arg}
			}
			for _, x := range list {
				if equalJSON(x, val) {
					return false
				}
			}
		default:
			return false // numeric and cidr do not occur in stream keys
		}
	}
	return true
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
