package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Serve gate for rolling schema upgrades (store/schema.go). While a
// deploy shifts traffic, two builds share one table; the gate keeps a
// build from serving a partition holding data written past its schema
// or a partition whose backfill checkpoint it did not declare, and
// answers sync.schema_not_ready instead (§10.2 of the wire-3 spec:
// internal, retryable, HTTP 503 with Retry-After; clients retry the
// request unchanged). The partition's gate state is read on every
// request, never cached; the table-wide marker (a store's bounded-age
// copy) refuses nothing by itself (gateRefusal): the partition's fence
// is what stops a build, checked at three points:
//
//  1. at entry, from the head TouchPartition returns (the marker, when
//     read, rides on the same BatchGetItem): no extra read;
//  2. inside every commit: the head condition carries this build's writer
//     version against the partition's fence and the gate token the entry
//     check passed on (store.CommitRequest), so a migration or a
//     declaration landing mid-request stops the write itself;
//  3. after the response is built, when it carries stored data (commits,
//     segments or conflict rows) the first two points did not cover
//     (gateNeedsRecheck): one ReadGate, and the buffered response is
//     dropped for a refusal if the gate refuses or moved meanwhile.

// schemaNotReadyMessage is the fixed message: it names no projection.
const schemaNotReadyMessage = "storage schema is not ready for this server version; retry later"

// runningSchema is the storage schema version this build writes.
func (e *Engine) runningSchema() int64 { return int64(e.schema.Latest) }

func notReady(details map[string]any) error {
	err := syncerr.New(syncerr.SchemaNotReady, "%s", schemaNotReadyMessage)
	if b, jerr := json.Marshal(details); jerr == nil {
		err.Details = b
	}
	return err
}

// isGateRefusal reports whether err is the gate's refusal (only the
// gate answers sync.schema_not_ready).
func isGateRefusal(err error) bool {
	se := syncerr.As(err)
	return se != nil && se.Code == syncerr.SchemaNotReady
}

// gateRefusal is nil when g lets this build serve the partition.
//
// Deploys keep serving (issue 20): what refuses an older build is its
// partition's writer fence, never the table-wide marker alone. The fence
// rises per partition, lazily, with the first commit of a newer build
// that writes a table layout this build cannot read (readerFloor), or
// with a checkpoint declaration, which runs after traffic has shifted.
// So while CodeDeploy shifts traffic both builds serve every partition
// neither has fenced, and after a rollback the older build serves again
// everything the newer one did not write in a layout of its own. The
// marker is bumped only after the shift and is the fence a partition
// created afterwards starts at (docs/OPERATIONS.md "Rolling schema
// upgrades").
func (e *Engine) gateRefusal(partition string, g *store.Gate) error {
	if g == nil {
		return nil
	}
	run := e.runningSchema()
	if g.WriterFence > run {
		return notReady(map[string]any{"storedSchemaVersion": g.WriterFence, "runningSchemaVersion": run})
	}
	for _, p := range g.Pending {
		// A checkpoint of this version that this build did not declare
		// (its declaring build serves while it backfills), or of a newer
		// version, is a projection this build cannot vouch for.
		if p.SchemaVersion > run || (p.SchemaVersion == run && !e.declared[p.Name]) {
			return notReady(map[string]any{"partition": partition, "projection": p.Name})
		}
	}
	return nil
}

// gateAtEntry checks the gate state TouchPartition read (step 1).
func (e *Engine) gateAtEntry(rs *reqState) error {
	if e.gates == nil {
		return nil
	}
	rs.report.gate = rs.head.Gate
	return e.gateRefusal(rs.auth.Partition, rs.head.Gate)
}

// gateForCommit fills the commit's gate fields and, for a head read again
// after a lost race, re-checks the partition's gate (step 2). The marker
// is the one read at entry: Head does not read it, and a marker moved
// since shows as a raised fence.
func (e *Engine) gateForCommit(rs *reqState, head store.Head, req *store.CommitRequest) error {
	req.WriterVersion = e.runningSchema()
	if e.gates == nil {
		return nil
	}
	if head.LogEpoch != rs.head.LogEpoch {
		// The log epoch rotated since the entry check (the gate token
		// moved with it): the request's epoch validation no longer holds.
		return notReady(map[string]any{"runningSchemaVersion": e.runningSchema()})
	}
	g := head.Gate
	if g != nil && rs.head.Gate != nil {
		c := *g
		c.StoredSchema = rs.head.Gate.StoredSchema
		g = &c
	}
	if err := e.gateRefusal(rs.auth.Partition, g); err != nil {
		return err
	}
	req.CheckGate = true
	if g != nil {
		req.GateToken = g.Token
	}
	// Schema versions start at 1: a fence of 1 would stop no build.
	if floor := e.readerFloor(req.Rows); floor > max(fenceOf(g), 1) {
		req.RaiseFence = floor
	}
	return nil
}

// materializeFirst: the first write of a build in a partition that has
// not materialised the table-wide checkpoint declaration yet
// (store.Gate.Unmaterialized) materialises it first, one atomic write
// that declares the checkpoints there and raises the partition's writer
// fence with them, as the migration's background walk would. From then
// on an older build is refused by the fence itself, also by its commit's
// own condition. retry: the gate token moved, so the commit is evaluated
// again on a head read afresh. A build that may not serve the partition
// (gateRefusal) materialises nothing: the commit meets its refusal.
//
// When the gate token moved by exactly this materialisation (one step,
// same log epoch) and the gate after it still lets this build serve, the
// request's later commits and the after-response check (step 3) compare
// against the gate after it, as gateOwnRaise does for a raised fence: the
// request's own change is no reason to refuse its response, while any
// other change since entry still moves the token past it.
func (e *Engine) materializeFirst(ctx context.Context, run *pushRun) (retry bool, err error) {
	g := run.head.Gate
	if e.gates == nil || g == nil || g.Unmaterialized == 0 || run.materialized {
		return false, nil
	}
	rs := run.rs
	if e.gateRefusal(rs.auth.Partition, g) != nil {
		return false, nil
	}
	run.materialized = true
	h, err := e.gates.MaterializeCheckpoints(ctx, rs.auth.Partition, rs.now)
	if err != nil {
		return false, storeErr(err, "materialize checkpoints")
	}
	if entry := rs.report.gate; entry != nil && h.Gate != nil && h.Gate.Token == entry.Token+1 &&
		h.LogEpoch == rs.head.LogEpoch && e.gateRefusal(rs.auth.Partition, h.Gate) == nil {
		after := *h.Gate
		after.StoredSchema = entry.StoredSchema
		rs.report.gate, rs.head.Gate = &after, &after
	}
	return true, nil
}

// gateOwnRaise: this request's commit raised the partition's writer
// fence (RaiseFence), which moves the gate token by exactly one in the
// same atomic write, conditioned on the token the commit was checked
// against. When that token is still the one the entry check passed on,
// nothing else moved the gate meanwhile, and the request's own fence,
// at or below this build's version, invalidates nothing it read or
// sends; so its later commits and the after-response check (step 3)
// compare with the token the commit left instead of refusing the
// request for its own write (which every first write of a new layout
// in a partition used to be).
func (e *Engine) gateOwnRaise(rs *reqState, req *store.CommitRequest) {
	if e.gates == nil || req.RaiseFence == 0 || !req.CheckGate {
		return
	}
	var entry store.Gate
	if rs.report.gate != nil {
		entry = *rs.report.gate
	}
	if entry.Token != req.GateToken {
		return
	}
	raised := func(g *store.Gate) *store.Gate {
		var c store.Gate
		if g != nil {
			c = *g
		}
		c.WriterFence, c.Token = max(c.WriterFence, req.RaiseFence), req.GateToken+1
		return &c
	}
	rs.report.gate = raised(rs.report.gate)
	rs.head.Gate = raised(rs.head.Gate)
}

func fenceOf(g *store.Gate) int64 {
	if g == nil {
		return 0
	}
	return g.WriterFence
}

// readerFloors maps every table of the storage (latest) version to the
// lowest served version whose build stores it in the same layout: the
// same columns in the same order with the same types and nullability,
// the same scope patterns, and the same declared references (§6.11: a
// child row is written with reference-index entries for the references
// its build declares, and a parent's delete acts on the entries it
// finds; a build declaring other references would delete a parent a
// newer row still refers to, or miss the children its own RESTRICT,
// CASCADE or SET NULL must see). A build of that version or later reads
// the rows this build writes; an older one cannot, so the first such
// commit fences it out of the partition (store.CommitRequest.RaiseFence).
// A table new in the latest version, or changed in it, has the latest
// version as its floor; versions the schema document does not carry are
// assumed to differ.
func readerFloors(s *schema.Schema) map[string]int64 {
	latest := s.Versions[s.Latest]
	served := s.Served()
	out := make(map[string]int64, len(latest.Tables))
	for _, t := range latest.Tables {
		floor := int64(s.Latest)
		for i := len(served) - 2; i >= 0; i-- { // served[len-1] is Latest
			if served[i] != int32(floor)-1 {
				break // a version in between is not carried: unknown layout
			}
			old, ok := s.Versions[served[i]].Table(t.Name)
			if !ok || !sameLayout(old, t) {
				break
			}
			floor = int64(served[i])
		}
		out[t.Name] = floor
	}
	return out
}

func sameLayout(a, b *schema.Table) bool {
	if !slices.Equal(a.Columns, b.Columns) || len(a.Scopes) != len(b.Scopes) || !sameReferences(a.References, b.References) {
		return false
	}
	for i := range a.Scopes {
		if a.Scopes[i].Pattern != b.Scopes[i].Pattern || a.Scopes[i].Column != b.Scopes[i].Column {
			return false
		}
	}
	return true
}

// sameReferences: the same references (§6.11), in any order: each
// column naming the same parent with the same ON DELETE action.
func sameReferences(a, b []schema.Reference) bool {
	if len(a) != len(b) {
		return false
	}
	for _, r := range a {
		if !slices.ContainsFunc(b, func(o schema.Reference) bool {
			return o.Column == r.Column && o.ParentTable == r.ParentTable && o.OnDelete == r.OnDelete
		}) {
			return false
		}
	}
	return true
}

// readerFloor is the lowest build version that reads every row of a
// commit's writes (0 for none).
func (e *Engine) readerFloor(rows []store.RowWrite) int64 {
	var floor int64
	for i := range rows {
		floor = max(floor, e.readerFloors[rows[i].Table])
	}
	return floor
}

// gateForRejection is gateForCommit for a rejected outcome: a rejection
// is fenced like a commit, so an old build whose entry gate passed just
// before a migration records no rejection after the fence was raised.
func (e *Engine) gateForRejection(rs *reqState, head store.Head) (store.WriterCheck, error) {
	var req store.CommitRequest
	err := e.gateForCommit(rs, head, &req)
	return store.WriterCheck{WriterVersion: req.WriterVersion, CheckGate: req.CheckGate, GateToken: req.GateToken}, err
}

// gateCommitError maps a commit the gate stopped; stopped is false for
// any other error. retry means the gate moved: read the head and check
// again; otherwise refusal is the answer.
func (e *Engine) gateCommitError(err error) (stopped, retry bool, refusal error) {
	switch {
	case errors.Is(err, store.ErrGateMoved):
		return true, true, nil
	case errors.Is(err, store.ErrWriterFenced):
		return true, false, notReady(map[string]any{"runningSchemaVersion": e.runningSchema()})
	}
	return false, false, nil
}

// gateNeedsRecheck: the response carries data read after the entry
// check that no commit point of the request vouched for. A push-only or
// quiet response derives from the head read at entry and from commits
// the gate token fenced.
//
// A push round's pull (issue 23) is covered by the round's own commit
// when every section window it served, (cursor, nextCursor] with the
// commits it skipped as out of scope, ends at or below rep.gatedSeq: the
// seq of an own commit whose commit point was conditioned on the gate
// token the check would compare with (gateCovered). In the terms of
// docs/OPERATIONS.md "Rolling schema upgrades": the serve gate's token
// changes whenever the partition's writer fence, its pending checkpoints
// or its log epoch change (store.Gate.Token), and never returns to an
// earlier value. The entry check found token T and a gate that lets this
// build serve; the commit point of own commit N, one atomic write,
// required the head to be at N−1 and the token to be T. So the token was
// T over the whole interval from the entry read to N's commit point, and
// every commit k ≤ N−1 the window holds was either
//   - written before the entry read: the fence at entry, which only
//     rises and is raised in the same write as the first commit of a
//     layout this build cannot read (RaiseFence), admitted this build,
//     so k is in a layout it reads (what every entry check rests on); or
//   - written between the entry read and N's commit point, while the
//     token stayed T: no fence was raised, no checkpoint declared, no
//     epoch rotated in that interval (each would have moved it).
//
// N itself is the request's own write, checked at its commit point. A
// fence raised, a checkpoint declared or an epoch rotated after N's
// commit point concerns commits after N only, which the window does not
// reach: commits never change once written (a window pruning crossed is
// answered reset, §4.6), so the response is the one this build would
// have sent at N's commit point, when the gate let it serve. Nothing
// read was written outside the gate's cover, so the re-read could only
// refuse a response whose every byte the gate already vouched for.
//
// The entry token is the one rep.gate holds: a request's own fence raise
// or checkpoint materialisation moves it by exactly its own write
// (gateOwnRaise, materializeFirst), and the commit after it is
// conditioned on the moved token. Segments, rejections (conflict rows
// are read outside any commit point) and any window past gatedSeq —
// commits a group holder landed, a replayed commit read again from the
// head (read-after-write), a commit conditioned on a token that moved
// since entry — keep the re-read.
func gateNeedsRecheck(rep *Report) bool {
	if rep.SegmentsSent > 0 || rep.Rejected > 0 {
		return true
	}
	return rep.CommitsSent > 0 && rep.pulledThrough > rep.gatedSeq
}

// gateCovered notes a landed own commit whose commit point was
// conditioned on the token the after-response check compares with (the
// entry token, or the one this request's own gate write left): the pull
// may serve up to it without that check (gateNeedsRecheck). Called
// before gateOwnRaise moves rep.gate past the commit's own raise.
func (e *Engine) gateCovered(rs *reqState, req *store.CommitRequest) {
	if e.gates == nil || !req.CheckGate {
		return
	}
	var entry int64
	if rs.report.gate != nil {
		entry = rs.report.gate.Token
	}
	if req.GateToken == entry {
		rs.report.gatedSeq = max(rs.report.gatedSeq, req.Commit.Seq)
	}
}

// gateAfterResponse reads the gate again (step 3) and refuses when it
// refuses now or moved since entry.
func (e *Engine) gateAfterResponse(ctx context.Context, partition string, entry *store.Gate) error {
	g, err := e.gates.ReadGate(ctx, partition)
	if err != nil {
		return storeErr(err, "read serve gate")
	}
	if err := e.gateRefusal(partition, &g); err != nil {
		return err
	}
	var before store.Gate
	if entry != nil {
		before = *entry
	}
	if g.Token != before.Token {
		return notReady(map[string]any{"storedSchemaVersion": g.WriterFence, "runningSchemaVersion": e.runningSchema()})
	}
	return nil
}

// handleGated runs handleSync into a buffer so the after-response check
// can still replace the whole response with a refusal. A host that
// already collects the response in a bytes.Buffer (httpapi does) gets it
// written there directly, cut back to where it started on a refusal: no
// second buffer grown per request, no copy.
func (e *Engine) handleGated(ctx context.Context, auth Auth, body []byte, opts SyncOptions, w io.Writer) (*Report, error) {
	if bw, ok := w.(*bytes.Buffer); ok {
		start := bw.Len()
		rep, err := e.handleSync(ctx, auth, body, opts, bw)
		if err == nil && rep.ErrorCode == "" && gateNeedsRecheck(rep) {
			if gerr := e.gateAfterResponse(ctx, auth.Partition, rep.gate); gerr != nil {
				bw.Truncate(start)
				rep.BytesOut = 0
				return rep, gerr
			}
		}
		return rep, err
	}
	buf := gateBufs.Get().(*bytes.Buffer)
	defer releaseGateBuf(buf)
	rep, err := e.handleGated(ctx, auth, body, opts, buf)
	if buf.Len() > 0 {
		if _, werr := w.Write(buf.Bytes()); werr != nil {
			return rep, errors.Join(err, fmt.Errorf("write response: %w", werr))
		}
	}
	return rep, err
}

// gateBufs are handleGated's response buffers for a host writer that is
// not a bytes.Buffer: the bytes are written to w before handleGated
// returns, so a buffer is free again after it.
var gateBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledGateBuf: a large response's buffer is left to the GC rather
// than pinned in the pool.
const maxPooledGateBuf = 256 << 10

func releaseGateBuf(b *bytes.Buffer) {
	if b.Cap() > maxPooledGateBuf {
		return
	}
	b.Reset()
	gateBufs.Put(b)
}
