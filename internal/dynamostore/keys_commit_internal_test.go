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
		// The realtime fanout sees every INSERT of the table stream: the
		// log-index entries (sk a bare seq, like a first log chunk) and
		// scope copies each commit writes must never parse as a commit,
		// whatever their names (a '#L' in a name is escaped away).
		for _, name := range []string{"L", "#L", "x#L", "", "%23L"} {
			for _, pk := range []string{
				logIndexPK(p, name, "v", name), logIndexPK(p, "t", name, "x"), logIndexPK(p, name, logIndexAny, ""),
				scopePK(p, name, "v", name), rowPK(p, name),
			} {
				if _, _, ok := ParseCommitKey(pk, seqSK(42)); ok {
					t.Fatalf("index key %q parsed as a commit", pk)
				}
			}
		}
	}
}
