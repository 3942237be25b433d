package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// ReadCounter is a store that counts its commit-log reads (ReadLog and
// ReadLogScoped) and its serve-gate reads (ReadGate).
type ReadCounter interface {
	LogReads() int64
	GateReads() int64
}

// ReadCounts implements ReadCounter for a store wrapper that adds to Logs
// and Gates in its read methods.
type ReadCounts struct{ Logs, Gates atomic.Int64 }

// LogReads implements ReadCounter.
func (r *ReadCounts) LogReads() int64 { return r.Logs.Load() }

// GateReads implements ReadCounter.
func (r *ReadCounts) GateReads() int64 { return r.Gates.Load() }

// RunPushRound checks a stock client's push round (push and pull in one
// request, §1.1) against the same pull sent on its own right after it:
// the round's subscription sections must be byte for byte what the
// separate pull answers, in wire versions 2 and 3 and for a client on an
// older schema version (rows transcoded, §2.4), with subscriptions that
// see the round's own commit, ones whose scopes do not, several at once,
// and cursors behind the head the push built on. A round whose every
// window is the request's own commits reads neither the log nor the
// serve gate again (issue 23); a window reaching further back reads the
// log. The stores must implement ReadCounter and store.SchemaStore.
func RunPushRound(t *testing.T, stores Stores) {
	for _, v := range []struct {
		name string
		new  func(t *testing.T) *Client
	}{
		{"v2", func(t *testing.T) *Client {
			return pushRoundHarness(t, stores, Options{}).Client("tenant", "alice", "dev")
		}},
		{"v3", func(t *testing.T) *Client {
			return pushRoundHarness(t, stores, Options{}).ClientV3("tenant", "alice", "dev")
		}},
		{"v3-older-schema", func(t *testing.T) *Client {
			c := pushRoundHarness(t, stores, Options{Schema: TodoSchemaV2, OlderSchemas: []string{TodoSchema}}).ClientV3("tenant", "alice", "dev")
			c.Schema = 1
			return c
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Run("own-commit-in-scope", func(t *testing.T) { roundOwnInScope(t, v.new(t)) })
			t.Run("own-commit-out-of-scope", func(t *testing.T) { roundOwnOutOfScope(t, v.new(t)) })
			t.Run("several-subscriptions", func(t *testing.T) { roundSeveral(t, v.new(t)) })
			t.Run("two-commits", func(t *testing.T) { roundTwoCommits(t, v.new(t)) })
			t.Run("cursor-behind", func(t *testing.T) { roundBehind(t, v.new(t)) })
		})
	}
}

func pushRoundHarness(t *testing.T, stores Stores, o Options) *Harness {
	st, segs := stores(t)
	if _, ok := st.(ReadCounter); !ok {
		t.Fatalf("%T does not count its reads (enginetest.ReadCounter)", st)
	}
	h := New(t, st, segs, o)
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1", "p2"}})
	h.Grants.Set("bob", engine.ScopeMap{"project_id": {"p1", "p2"}})
	return h
}

func scopedSub(id, table, project string, cursor int64) wire.Subscription {
	return wire.Subscription{ID: id, Table: table, Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}, Cursor: cursor}
}

// roundReads are the store reads one request made.
type roundReads struct{ log, gate int64 }

// round sends commits and a pull of subs in one request, then the same
// pull alone, and fails unless the sections match byte for byte. It
// returns the round's reads and sections.
func round(t *testing.T, c *Client, commits []wire.PushCommit, subs []wire.Subscription) (roundReads, []*Section) {
	t.Helper()
	rc := c.H.Store.(ReadCounter)
	log0, gate0 := rc.LogReads(), rc.GateReads()
	resp, err := c.Send(c.Request(commits, &wire.PullHeader{Accept: c.Accept}, subs))
	if err != nil {
		t.Fatalf("push round: %v", err)
	}
	reads := roundReads{rc.LogReads() - log0, rc.GateReads() - gate0}
	results := 0
	for _, f := range resp.Frames {
		if r, ok := f.(*wire.PushResult); ok {
			applied(t, r)
			results++
		}
	}
	if results != len(commits) {
		t.Fatalf("push round answered %d push results for %d commits", results, len(commits))
	}
	alone, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: c.Accept}, subs))
	if err != nil {
		t.Fatalf("pull after the round: %v", err)
	}
	got, want := sectionBytes(t, resp), sectionBytes(t, alone)
	if !bytes.Equal(got, want) {
		t.Fatalf("the round's pull sections differ from a pull sent after it:\nround: %s\nalone: %s", describeSections(t, resp), describeSections(t, alone))
	}
	return reads, Sections(t, resp)
}

// sectionBytes encodes a response's RESP_HEADER and its frames from its
// first SUB_START on (the pull half) as one message of its wire version.
func sectionBytes(t *testing.T, m *wire.Message) []byte {
	t.Helper()
	for i, f := range m.Frames {
		if _, ok := f.(*wire.SubStart); ok {
			frames := append([]wire.Frame{m.Frames[0]}, m.Frames[i:]...)
			b, err := wire.Encode(&wire.Message{WireVersion: m.WireVersion, Kind: wire.KindResponse, Frames: frames})
			if err != nil {
				t.Fatalf("encode sections: %v", err)
			}
			return b
		}
	}
	t.Fatal("response has no subscription section")
	return nil
}

func describeSections(t *testing.T, m *wire.Message) string {
	var b bytes.Buffer
	for _, s := range Sections(t, m) {
		fmt.Fprintf(&b, "[%s %v next=%d commits:", s.Start.ID, s.Start.Status, s.End.NextCursor)
		for _, c := range s.Commits {
			fmt.Fprintf(&b, " %d(%d changes)", c.CommitSeq, len(c.Changes))
		}
		b.WriteString("] ")
	}
	return b.String()
}

func roundCommit(c *Client, id, rowID, project string) wire.PushCommit {
	return wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{Upsert("tasks", rowID, c.Task(rowID, project, "title "+rowID, false), -1)}}
}

func partitionHead(t *testing.T, c *Client) int64 {
	t.Helper()
	h, _, err := c.H.Store.Head(context.Background(), c.Partition)
	if err != nil {
		t.Fatal(err)
	}
	return h.MaxCommitSeq
}

// warm binds the client and returns the head E its next round builds on.
func warm(t *testing.T, c *Client) int64 {
	t.Helper()
	applied(t, c.Push("warm", Upsert("tasks", "t0", c.Task("t0", "p1", "warm", false), -1)))
	return partitionHead(t, c)
}

func wantReads(t *testing.T, got roundReads, log, gate int64, what string) {
	t.Helper()
	if got.log != log || got.gate != gate {
		t.Fatalf("%s: %d log reads and %d gate reads, want %d and %d", what, got.log, got.gate, log, gate)
	}
}

// roundOwnInScope: cursor E, the round commits E+1 in the subscription's
// scope; the section carries it from memory.
func roundOwnInScope(t *testing.T, c *Client) {
	e := warm(t, c)
	reads, secs := round(t, c, []wire.PushCommit{roundCommit(c, "c1", "t1", "p1")}, []wire.Subscription{scopedSub("s", "tasks", "p1", e)})
	if len(secs[0].Commits) != 1 || secs[0].Commits[0].CommitSeq != e+1 || secs[0].End.NextCursor != e+1 {
		t.Fatalf("section: %d commits, next %d; want the own commit %d", len(secs[0].Commits), secs[0].End.NextCursor, e+1)
	}
	wantReads(t, reads, 0, 0, "round over its own commit")
}

// roundOwnOutOfScope: the own commit is in p1, the subscription wants
// p2: no commit, the cursor still moves to E+1.
func roundOwnOutOfScope(t *testing.T, c *Client) {
	e := warm(t, c)
	reads, secs := round(t, c, []wire.PushCommit{roundCommit(c, "c1", "t1", "p1")}, []wire.Subscription{scopedSub("s", "tasks", "p2", e)})
	if len(secs[0].Commits) != 0 || secs[0].End.NextCursor != e+1 {
		t.Fatalf("out-of-scope section: %d commits, next %d; want none, %d", len(secs[0].Commits), secs[0].End.NextCursor, e+1)
	}
	wantReads(t, reads, 0, 0, "round over its own out-of-scope commit")
}

// roundSeveral: three subscriptions at E (the own commit's table and
// scope, the other scope, another table).
func roundSeveral(t *testing.T, c *Client) {
	e := warm(t, c)
	subs := []wire.Subscription{scopedSub("a", "tasks", "p1", e), scopedSub("b", "tasks", "p2", e), scopedSub("c", "projects", "p1", e)}
	reads, secs := round(t, c, []wire.PushCommit{roundCommit(c, "c1", "t1", "p1")}, subs)
	if len(secs) != 3 || len(secs[0].Commits) != 1 || len(secs[1].Commits)+len(secs[2].Commits) != 0 {
		t.Fatalf("sections: %d, want the own commit in the first only", len(secs))
	}
	wantReads(t, reads, 0, 0, "round with several subscriptions")
}

// roundTwoCommits: two commits in one round, E+1 and E+2, both served.
func roundTwoCommits(t *testing.T, c *Client) {
	e := warm(t, c)
	reads, secs := round(t, c, []wire.PushCommit{roundCommit(c, "c1", "t1", "p1"), roundCommit(c, "c2", "t2", "p1")},
		[]wire.Subscription{scopedSub("s", "tasks", "p1", e)})
	if len(secs[0].Commits) != 2 || secs[0].End.NextCursor != e+2 {
		t.Fatalf("two-commit round: %d commits, next %d", len(secs[0].Commits), secs[0].End.NextCursor)
	}
	wantReads(t, reads, 0, 0, "round over its two commits")
}

// roundBehind: another client committed E after the subscription's
// cursor E−1, so the window (E−1, E+1] holds a commit this request did
// not write: it reads the log, for that subscription only, and the
// response is still the separate pull's. A second subscription at E is
// served beside it.
func roundBehind(t *testing.T, c *Client) {
	cursor := warm(t, c)
	other := *c
	other.Actor, other.ID = "bob", "other"
	applied(t, other.Push("o1", Upsert("tasks", "tb", other.Task("tb", "p1", "from bob", false), -1)))
	e := partitionHead(t, c)
	subs := []wire.Subscription{scopedSub("behind", "tasks", "p1", cursor), scopedSub("at", "projects", "p1", e)}
	reads, secs := round(t, c, []wire.PushCommit{roundCommit(c, "c1", "t1", "p1")}, subs)
	if len(secs[0].Commits) != 2 || secs[0].End.NextCursor != e+1 {
		t.Fatalf("behind: %d commits, next %d; want 2, %d", len(secs[0].Commits), secs[0].End.NextCursor, e+1)
	}
	if reads.log == 0 {
		t.Fatal("a window holding another client's commit was served without reading the log")
	}
	if reads.gate != 0 {
		t.Fatalf("a window ending at the own commit read the gate %d times", reads.gate)
	}
}
