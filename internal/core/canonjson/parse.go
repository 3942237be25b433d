package canonjson

import (
	"bytes"
	"encoding/json"
	"io"
	"unicode/utf8"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// ParseScopeMap parses the X-Syncular-Scopes header (§5.5): one JSON
// object whose values are arrays of strings. It is strict where a lenient
// reading could make two servers authorize differently: the text must be
// valid UTF-8 and exactly one JSON value, keys must be unique, and every
// list element must be a string. Key order, list order and duplicate list
// values are accepted as sent — the caller computes effective scopes and
// the digest canonicalizes them (§3.5). Failures are sync.invalid_request.
func ParseScopeMap(b []byte) (map[string][]string, error) {
	if !utf8.Valid(b) {
		return nil, bad("is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, bad("is not JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, bad("must be a JSON object")
	}
	out := map[string][]string{}
	for dec.More() {
		tok, err = dec.Token()
		if err != nil {
			return nil, bad("is not JSON")
		}
		key, ok := tok.(string)
		if !ok {
			return nil, bad("is not JSON")
		}
		if _, dup := out[key]; dup {
			return nil, bad("repeats key %q", key)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, bad("is not JSON")
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return nil, bad("value of %q must be a list of strings", key)
		}
		vals := []string{}
		for dec.More() {
			tok, err = dec.Token()
			if err != nil {
				return nil, bad("is not JSON")
			}
			s, ok := tok.(string)
			if !ok {
				return nil, bad("value of %q must be a list of strings", key)
			}
			vals = append(vals, s)
		}
		if _, err = dec.Token(); err != nil { // closing ]
			return nil, bad("is not JSON")
		}
		out[key] = vals
	}
	if _, err = dec.Token(); err != nil { // closing }
		return nil, bad("is not JSON")
	}
	if _, err = dec.Token(); err != io.EOF {
		return nil, bad("has data after the JSON object")
	}
	return out, nil
}

func bad(format string, args ...any) error {
	return syncerr.New(syncerr.InvalidRequest, "X-Syncular-Scopes "+format, args...)
}
