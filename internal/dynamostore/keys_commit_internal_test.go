package dynamostore

import "testing"

func TestParseCommitKeyInvertsLogKeys(t *testing.T) {
	for _, p := range []string{"tenant", "a#b%c", "%23"} {
		if got, seq, ok := ParseCommitKey(logPK(p), chunkSK(42, 0)); !ok || got != p || seq != 42 {
			t.Fatalf("first chunk of %q: %q %d %v", p, got, seq, ok)
		}
		if _, _, ok := ParseCommitKey(logPK(p), chunkSK(42, 1)); ok {
			t.Fatalf("a later chunk of %q parsed as a commit", p)
		}
		if _, _, ok := ParseCommitKey(clientPK(p), clientSK("x")); ok {
			t.Fatalf("a client record of %q parsed as a commit", p)
		}
	}
}
