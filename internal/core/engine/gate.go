package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// Serve gate for rolling schema upgrades (store/schema.go). While a
// deploy shifts traffic, two builds share one table; the gate keeps a
// build from serving a table migrated past its schema or a partition
// whose backfill checkpoint it did not declare, and answers
// sync.schema_not_ready instead (§10.2 of the wire-3 spec: internal,
// retryable, HTTP 503; clients retry the request unchanged). The
// partition's gate state is read on every request, never cached; the
// table-wide marker may be a store's bounded-age copy (dynamostore's
// markerCache: no item is read by every request of every tenant), which
// is safe because step 2's fence, not the marker, stops a write:
//
//  1. at entry, from the head TouchPartition returns (the marker, when
//     read, rides on the same BatchGetItem): no extra read;
//  2. inside every commit: the head condition carries this build's writer
//     version against the partition's fence and the gate token the entry
//     check passed on (store.CommitRequest), so a migration or a
//     declaration landing mid-request stops the write itself;
//  3. after the response is built, when it carries stored data (commits,
//     segments or conflict rows): one ReadGate, and the buffered response
//     is dropped for a refusal if the gate refuses or moved meanwhile.

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

// gateRefusal is nil when g lets this build serve the partition.
func (e *Engine) gateRefusal(partition string, g *store.Gate) error {
	if g == nil {
		return nil
	}
	run := e.runningSchema()
	if stored := max(g.StoredSchema, g.WriterFence); stored > run {
		return notReady(map[string]any{"storedSchemaVersion": stored, "runningSchemaVersion": run})
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
	return nil
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
// check. A push-only or quiet response derives from the head read at
// entry and from commits the gate token fenced.
func gateNeedsRecheck(rep *Report) bool {
	return rep.CommitsSent > 0 || rep.SegmentsSent > 0 || rep.Rejected > 0
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
	if g.StoredSchema != before.StoredSchema || g.Token != before.Token {
		return notReady(map[string]any{"storedSchemaVersion": g.StoredSchema, "runningSchemaVersion": e.runningSchema()})
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
