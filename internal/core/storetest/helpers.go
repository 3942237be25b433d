package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// baseMs is the suite's clock origin: a realistic epoch-ms value, so a
// backend that derives TTLs from timestamps sees sane numbers.
const baseMs int64 = 1_700_000_000_000

const dayMs int64 = 24 * 60 * 60 * 1000

// unique returns a name no other subtest or run uses, so every subtest can
// own its partition (and its segment ids) on a shared backend.
func unique(t *testing.T, what string) string {
	return fmt.Sprintf("storetest/%s/%s/%s", t.Name(), what, rand.Text()[:12])
}

// partitionT is one subtest's store and freshly named partition.
type partitionT struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
	p   string
}

func newPartition(t *testing.T, newStore func(t *testing.T) store.Store) *partitionT {
	t.Helper()
	return &partitionT{t: t, s: newStore(t), ctx: context.Background(), p: unique(t, "p")}
}

// touch creates the partition with a fresh epoch and returns the head.
func (e *partitionT) touch() store.Head {
	e.t.Helper()
	h, err := e.s.TouchPartition(e.ctx, e.p, baseMs, unique(e.t, "epoch"))
	if err != nil {
		e.t.Fatalf("TouchPartition: %v", err)
	}
	return h
}

func (e *partitionT) head() store.Head {
	e.t.Helper()
	h, ok, err := e.s.Head(e.ctx, e.p)
	if err != nil || !ok {
		e.t.Fatalf("Head: ok=%v err=%v", ok, err)
	}
	return h
}

func (e *partitionT) commit(req *store.CommitRequest) {
	e.t.Helper()
	if err := e.s.Commit(e.ctx, e.p, req); err != nil {
		e.t.Fatalf("Commit seq %d: %v", req.Commit.Seq, err)
	}
}

// commitNext commits writes as the next seq under a fresh idempotency key
// and returns the request.
func (e *partitionT) commitNext(writes ...store.RowWrite) *store.CommitRequest {
	e.t.Helper()
	h := e.head()
	req := commitReq(h.MaxCommitSeq, "client-a", fmt.Sprintf("cc-%d", h.MaxCommitSeq+1), writes...)
	e.commit(req)
	return req
}

func (e *partitionT) rows(table string, ids ...string) map[string]*store.Row {
	e.t.Helper()
	m, err := e.s.GetRows(e.ctx, e.p, table, ids)
	if err != nil {
		e.t.Fatalf("GetRows: %v", err)
	}
	return m
}

func (e *partitionT) scan(table, after string, hasAfter bool) []*store.Row {
	e.t.Helper()
	var out []*store.Row
	if err := e.s.ScanRows(e.ctx, e.p, table, after, hasAfter, func(r *store.Row) bool {
		out = append(out, r)
		return true
	}); err != nil {
		e.t.Fatalf("ScanRows: %v", err)
	}
	return out
}

func (e *partitionT) log(afterSeq, throughSeq int64) []*store.Commit {
	e.t.Helper()
	var out []*store.Commit
	if err := e.s.ReadLog(e.ctx, e.p, afterSeq, throughSeq, func(c *store.Commit) bool {
		out = append(out, c)
		return true
	}); err != nil {
		e.t.Fatalf("ReadLog: %v", err)
	}
	return out
}

func (e *partitionT) outcome(clientID, clientCommitID string) *store.Outcome {
	e.t.Helper()
	o, err := e.s.GetOutcome(e.ctx, e.p, clientID, clientCommitID, baseMs)
	if err != nil {
		e.t.Fatalf("GetOutcome: %v", err)
	}
	return o
}

func (e *partitionT) clients() map[string]store.Client {
	e.t.Helper()
	out := map[string]store.Client{}
	if err := e.s.ListClients(e.ctx, e.p, func(c *store.Client) bool {
		if _, dup := out[c.ClientID]; dup {
			e.t.Errorf("ListClients returned %q twice", c.ClientID)
		}
		out[c.ClientID] = *c
		return true
	}); err != nil {
		e.t.Fatalf("ListClients: %v", err)
	}
	return out
}

func (e *partitionT) commitTimes(afterSeq int64) [][2]int64 {
	e.t.Helper()
	var out [][2]int64
	if err := e.s.CommitTimes(e.ctx, e.p, afterSeq, func(seq, at int64) bool {
		out = append(out, [2]int64{seq, at})
		return true
	}); err != nil {
		e.t.Fatalf("CommitTimes: %v", err)
	}
	return out
}

// upsert is a row write with its payload; the commit's seq is stamped by
// commitReq.
func upsert(table, id string, version int64, payload string, scopes ...string) store.RowWrite {
	return store.RowWrite{Table: table, Row: store.Row{
		RowID:   id,
		Version: version,
		Scopes:  scopeList(scopes...),
		Payload: []byte(payload),
	}}
}

func del(table, id string, scopes ...string) store.RowWrite {
	return store.RowWrite{Table: table, Delete: true, Row: store.Row{RowID: id, Scopes: scopeList(scopes...)}}
}

// scopeList turns "k=v" pairs into stored scopes.
func scopeList(kv ...string) wire.StoredScopes {
	var out wire.StoredScopes
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out = append(out, wire.StoredScope{Key: k, Value: v})
	}
	return out
}

// commitReq builds a request the way the engine does: seq, changes derived
// from the writes, applied outcome, rows stamped with the commit seq.
func commitReq(expected int64, clientID, clientCommitID string, writes ...store.RowWrite) *store.CommitRequest {
	seq := expected + 1
	req := &store.CommitRequest{
		ExpectedMaxSeq: expected,
		Commit: store.Commit{
			Seq:            seq,
			CreatedAtMs:    baseMs + seq*1000,
			ActorID:        "actor-" + clientID,
			ClientID:       clientID,
			ClientCommitID: clientCommitID,
		},
		Outcome: store.Outcome{
			Applied:      true,
			CommitSeq:    seq,
			Result:       []byte("applied:" + clientCommitID),
			RecordedAtMs: baseMs + seq*1000,
			ActorID:      "actor-" + clientID,
		},
	}
	for _, w := range writes {
		w.Row.CommitSeq = seq
		req.Rows = append(req.Rows, w)
		ch := store.Change{Table: w.Table, RowID: w.Row.RowID, Op: wire.OpDelete, Scopes: w.Row.Scopes}
		if !w.Delete {
			ch.Op = wire.OpUpsert
			ch.RowVersion = w.Row.Version
			ch.Row = w.Row.Payload
		}
		req.Commit.Changes = append(req.Commit.Changes, ch)
	}
	return req
}

// The normalizers make comparisons indifferent to nil versus empty, which
// the interface does not promise to preserve.

func normScopes(s wire.StoredScopes) wire.StoredScopes {
	if len(s) == 0 {
		return nil
	}
	return s
}

func normBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func normRow(r store.Row) store.Row {
	r.Scopes = normScopes(r.Scopes)
	r.Payload = normBytes(r.Payload)
	return r
}

func normCommit(c store.Commit) store.Commit {
	var ch []store.Change
	for _, x := range c.Changes {
		x.Scopes = normScopes(x.Scopes)
		x.Row = normBytes(x.Row)
		ch = append(ch, x)
	}
	c.Changes = ch
	return c
}

func normOutcome(o store.Outcome) store.Outcome {
	o.Result = normBytes(o.Result)
	return o
}

func checkRow(t *testing.T, got *store.Row, want store.Row) {
	t.Helper()
	if got == nil {
		t.Fatalf("row %q missing", want.RowID)
	}
	if g, w := normRow(*got), normRow(want); !reflect.DeepEqual(g, w) {
		t.Errorf("row %q:\n got %+v\nwant %+v", want.RowID, g, w)
	}
}

// checkTombstone asserts got is the tombstone of id left by commit seq:
// flagged, keeping the deleted row's scopes (kv "k=v" pairs), with no
// payload or column versions.
func checkTombstone(t *testing.T, got *store.Row, id string, seq int64, scopes ...string) {
	t.Helper()
	if got == nil {
		t.Fatalf("tombstone %q missing", id)
	}
	if !got.Deleted || got.RowID != id || got.CommitSeq != seq || len(got.Payload) != 0 || got.ColumnVersions != nil || got.Version != 0 ||
		!slices.Equal(got.Scopes, scopeList(scopes...)) {
		t.Errorf("tombstone %q: got %+v, want Deleted, CommitSeq %d, scopes %v, no payload or column versions", id, *got, seq, scopes)
	}
}

func checkCommit(t *testing.T, got *store.Commit, want store.Commit) {
	t.Helper()
	if g, w := normCommit(*got), normCommit(want); !reflect.DeepEqual(g, w) {
		t.Errorf("commit %d:\n got %+v\nwant %+v", want.Seq, g, w)
	}
}

func checkOutcome(t *testing.T, got *store.Outcome, want store.Outcome) {
	t.Helper()
	if got == nil {
		t.Fatalf("outcome missing, want %+v", want)
	}
	if g, w := normOutcome(*got), normOutcome(want); !reflect.DeepEqual(g, w) {
		t.Errorf("outcome:\n got %+v\nwant %+v", g, w)
	}
}

func seqs(cs []*store.Commit) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Seq
	}
	return out
}

func seqRange(from, through int64) []int64 {
	out := []int64{}
	for s := from; s <= through; s++ {
		out = append(out, s)
	}
	return out
}

func rowIDs(rs []*store.Row) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.RowID
	}
	return out
}

// segmentID is the §5.1 content address of body.
func segmentID(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}
