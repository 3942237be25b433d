// Package migrate is the operator side of rolling schema upgrades
// (store/schema.go): the migration step a deploy runs once traffic has
// shifted to the new build (bump the schema marker, declare backfill
// checkpoints) and the backfill runner that fills a checkpoint's
// projection in resumable batches and activates it.
//
// Nothing here holds traffic back (issue 20). Partitions are fenced
// lazily: the new build's first commit that writes a table layout an
// older build cannot read raises that partition's writer fence in the
// same transaction (engine readerFloor), and a checkpoint declaration
// raises its partition's fence with the declaration. A step without
// checkpoints is therefore O(1) in partitions (one marker update), and
// an older build serves every partition nothing newer was written to,
// during the traffic shift and after a rollback.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Backend is a store with the rolling-upgrade side.
type Backend interface {
	store.Store
	store.SchemaStore
}

// Declaration is one backfill checkpoint a schema version declares.
type Declaration struct {
	Name    string
	Sources []string
}

// Plan is one migration step to storage schema Version.
type Plan struct {
	Version     int64
	Checkpoints []Declaration
	// Partitions lists every partition (the partition registry); only
	// walked when the plan declares checkpoints.
	Partitions func(ctx context.Context, fn func(partition string) bool) error
	// Now is the clock of checkpoint timestamps.
	Now func() int64
	// Parallel is how many partitions are fenced and declared at once
	// (0: DefaultParallel). Each partition's step stays sequential.
	Parallel int
}

// Progress reports what a step or a backfill did.
type Progress struct {
	Marker      int64
	Partitions  int
	Fenced      int // partitions with every checkpoint declared (fenced with it)
	Declared    int
	Batches     int
	Rows        int64
	Activated   int
	Outcomes    map[string]store.ActivationOutcome // partition␟name → last outcome
	Incomplete  int                                // checkpoints not activated
	Superseded  bool                               // a newer owner took over
	TimedOutNow bool                               // stopped at the deadline; resume later
}

// Step bumps the marker to p.Version and declares p's checkpoints on
// every partition (each declaration raises that partition's writer fence
// in the same transaction). Without checkpoints it touches no partition:
// the marker is then one update, whatever the number of partitions.
// Every part is idempotent: a step interrupted anywhere is finished by
// running it again.
func Step(ctx context.Context, b Backend, p Plan) (Progress, error) {
	var pr Progress
	m, err := b.BumpSchemaMarker(ctx, p.Version)
	if err != nil {
		return pr, fmt.Errorf("bump schema marker: %w", err)
	}
	pr.Marker = m
	if m > p.Version {
		return pr, fmt.Errorf("stored schema marker %d is newer than %d: roll forward only", m, p.Version)
	}
	if len(p.Checkpoints) == 0 {
		return pr, nil
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	err = eachPartition(ctx, p.Partitions, p.Parallel, func(part string) bool {
		declared, err := stepPartition(ctx, b, p, part)
		mu.Lock()
		defer mu.Unlock()
		pr.Partitions++
		if declared == len(p.Checkpoints) {
			pr.Fenced++
		}
		pr.Declared += declared
		if err != nil {
			errs = append(errs, err)
			return false
		}
		return true
	})
	return pr, errors.Join(append(errs, err)...)
}

// stepPartition declares p's checkpoints on one partition; each
// declaration raises the partition's writer fence to p.Version in its own
// transaction, so a checkpoint is only declared on a partition the old
// build can no longer write.
func stepPartition(ctx context.Context, b Backend, p Plan, part string) (declared int, err error) {
	for _, d := range p.Checkpoints {
		if _, err := b.DeclareCheckpoint(ctx, part, d.Name, p.Version, d.Sources, p.Now()); err != nil {
			return declared, fmt.Errorf("declare checkpoint %s on %q: %w", d.Name, part, err)
		}
		declared++
	}
	return declared, nil
}

// Transform maps one current source row to the projection's row writes
// (none to skip it). Writes must be full rows: Version set, CommitSeq
// is stamped by the runner.
type Transform func(table string, row *store.Row) []store.RowWrite

// BackfillOptions bound one backfill run.
type BackfillOptions struct {
	BatchRows int
	// Deadline, when set, is checked between batches: the run stops
	// (TimedOutNow) and a later run resumes from the stored cursor.
	Deadline func() bool
	Now      func() int64
	// MaxCatchUps bounds the catch up → activate attempts (default 64).
	MaxCatchUps int
}

// BackfillClientID is the reserved server-command clientId (§1.5) of
// backfill commits; clients cannot use the namespace.
const BackfillClientID = `["remote-command","backfill"]`

// cursorDone marks a finished scan; the watermark then drives catch-ups.
const cursorDone = "\x00done"

// Backfill claims checkpoint name of partition, scans its source tables
// from the stored cursor in batches (each one ordinary commit under a
// deterministic idempotency key, advancing the checkpoint in the same
// transaction), then activates it, catching up on source changes the
// scan raced. A superseded run stops without writing (Superseded).
func Backfill(ctx context.Context, b Backend, partition, name string, fn Transform, o BackfillOptions) (Progress, error) {
	pr := Progress{Outcomes: map[string]store.ActivationOutcome{}}
	if o.BatchRows <= 0 {
		o.BatchRows = 50
	}
	if o.MaxCatchUps <= 0 {
		o.MaxCatchUps = 64
	}
	if o.Deadline == nil {
		o.Deadline = func() bool { return false }
	}
	c, err := b.ClaimCheckpoint(ctx, partition, name, o.Now())
	if errors.Is(err, store.ErrCheckpointActivated) {
		pr.Activated++
		return pr, nil
	}
	if err != nil {
		return pr, fmt.Errorf("claim %s: %w", name, err)
	}
	r := &runner{b: b, p: partition, c: c, fn: fn, o: o, pr: &pr}
	if err := r.scan(ctx); err != nil || pr.Superseded || pr.TimedOutNow {
		return pr, err
	}
	out, err := r.activate(ctx)
	if err != nil || pr.Superseded {
		return pr, err
	}
	pr.Outcomes[partition+"\x1f"+name] = out
	switch out {
	case store.Activated:
		pr.Activated++
		return pr, nil
	case store.Unverifiable:
		pr.Incomplete++
		return pr, fmt.Errorf("checkpoint %s of %q: the log above its watermark %d was pruned; re-run the backfill from scratch (declare a new name)", name, partition, c.Watermark)
	}
	pr.Incomplete++
	return pr, nil
}

// activate catches up with the partition's head and activates the
// checkpoint at it in one conditional write (store.CheckpointAdvance.
// Activate): the head condition is the lock, so a source commit landing
// meanwhile only costs another catch-up of the commits since, and the
// activation cannot be starved by a busy partition the way a separate
// check-then-activate could (each attempt's window is one head read, one
// log read and the write).
func (r *runner) activate(ctx context.Context) (store.ActivationOutcome, error) {
	for range r.o.MaxCatchUps {
		h, _, err := r.b.Head(ctx, r.p)
		if err != nil {
			return "", err
		}
		if h.HorizonSeq > r.c.Watermark {
			return store.Unverifiable, nil
		}
		if h.Gate == nil || h.Gate.WriterFence < r.c.SchemaVersion {
			return "", store.ErrFenceMissing
		}
		if h.MaxCommitSeq > r.c.Watermark {
			wrote, err := r.catchUp(ctx, h.MaxCommitSeq)
			if err != nil || r.pr.Superseded || r.pr.TimedOutNow {
				return store.Stale, err
			}
			if wrote {
				continue // its own commit moved the head: read it again
			}
		}
		adv := store.CheckpointAdvance{Name: r.c.Name, Epoch: r.c.OwnerEpoch, Watermark: h.MaxCommitSeq, Cursor: cursorDone,
			Activate: true, SchemaVersion: r.c.SchemaVersion}
		ok, err := r.b.AdvanceCheckpoint(ctx, r.p, adv, r.o.Now())
		if err != nil {
			return "", err
		}
		if ok {
			return store.Activated, nil
		}
		c, err := r.b.GetCheckpoint(ctx, r.p, r.c.Name)
		if err != nil {
			return "", err
		}
		switch {
		case c != nil && c.State == store.CheckpointActivated:
			return store.Activated, nil
		case c == nil || c.OwnerEpoch != r.c.OwnerEpoch:
			r.pr.Superseded = true
			return store.Stale, nil
		}
	}
	return store.Stale, nil
}

type runner struct {
	b  Backend
	p  string
	c  *store.Checkpoint
	fn Transform
	o  BackfillOptions
	pr *Progress
}

// scan walks the source tables from the cursor ("<table index>:<rowId>").
func (r *runner) scan(ctx context.Context) error {
	if r.c.Cursor == "" {
		// The watermark a scan starts from: every commit at or below the
		// head read now is visible to the scan.
		h, _, err := r.b.Head(ctx, r.p)
		if err != nil {
			return err
		}
		r.c.Watermark = h.MaxCommitSeq
	}
	ti, after := 0, ""
	hasAfter := false
	if r.c.Cursor == cursorDone {
		return nil
	}
	if r.c.Cursor != "" {
		if _, err := fmt.Sscanf(r.c.Cursor, "%d:", &ti); err != nil {
			return fmt.Errorf("checkpoint %s: bad cursor %q", r.c.Name, r.c.Cursor)
		}
		after = r.c.Cursor[len(fmt.Sprint(ti))+1:]
		hasAfter = true
	}
	for ; ti < len(r.c.Sources); ti, after, hasAfter = ti+1, "", false {
		table := r.c.Sources[ti]
		for {
			if r.o.Deadline() {
				r.pr.TimedOutNow = true
				return nil
			}
			var rows []*store.Row
			err := r.b.ScanRows(ctx, r.p, table, after, hasAfter, func(row *store.Row) bool {
				rows = append(rows, row)
				return len(rows) < r.o.BatchRows
			})
			if err != nil {
				return err
			}
			cursor := cursorDone
			if len(rows) == r.o.BatchRows {
				cursor = fmt.Sprintf("%d:%s", ti, rows[len(rows)-1].RowID)
			} else if ti+1 < len(r.c.Sources) {
				cursor = fmt.Sprintf("%d:", ti+1)
			}
			var writes []store.RowWrite
			for _, row := range rows {
				writes = append(writes, r.fn(table, row)...)
			}
			key := fmt.Sprintf("backfill/%s/v%d/scan/%s", r.c.Name, r.c.SchemaVersion, r.c.Cursor)
			if err := r.batch(ctx, key, writes, r.c.Watermark, cursor, int64(len(rows))); err != nil || r.pr.Superseded {
				return err
			}
			if cursor == cursorDone || len(rows) < r.o.BatchRows {
				break
			}
			after, hasAfter = rows[len(rows)-1].RowID, true
		}
		if r.c.Cursor == cursorDone {
			return nil
		}
	}
	return nil
}

// catchUp re-projects the source rows changed above the watermark up
// to head and, when that writes rows, lands them as one commit that
// moves the watermark to head (wrote). With nothing to write it leaves
// the watermark where it is: the activating advance moves it.
func (r *runner) catchUp(ctx context.Context, head int64) (wrote bool, err error) {
	changed := map[string]map[string]bool{}
	err = r.b.ReadLog(ctx, r.p, r.c.Watermark, head, func(c *store.Commit) bool {
		for _, ch := range c.Changes {
			if slices.Contains(r.c.Sources, ch.Table) {
				if changed[ch.Table] == nil {
					changed[ch.Table] = map[string]bool{}
				}
				changed[ch.Table][ch.RowID] = true
			}
		}
		return true
	})
	if err != nil {
		return false, err
	}
	var writes []store.RowWrite
	var n int64
	for _, table := range r.c.Sources {
		ids := make([]string, 0, len(changed[table]))
		for id := range changed[table] {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		rows, err := r.b.GetRows(ctx, r.p, table, ids)
		if err != nil {
			return false, err
		}
		for _, id := range ids {
			if row := rows[id]; row != nil && !row.Deleted {
				writes = append(writes, r.fn(table, row)...)
				n++
			}
		}
	}
	if len(writes) == 0 {
		return false, nil
	}
	key := fmt.Sprintf("backfill/%s/v%d/catchup/%d", r.c.Name, r.c.SchemaVersion, r.c.Watermark)
	return true, r.batch(ctx, key, writes, head, cursorDone, n)
}

// batch lands writes and the checkpoint's advance atomically: one
// server commit under the deterministic key, or a bare advance when
// there is nothing to write. A lost race re-reads the head and retries;
// a superseded owner stops.
func (r *runner) batch(ctx context.Context, key string, writes []store.RowWrite, watermark int64, cursor string, observed int64) error {
	adv := store.CheckpointAdvance{Name: r.c.Name, Epoch: r.c.OwnerEpoch, Watermark: watermark, Cursor: cursor, Observed: observed}
	now := r.o.Now()
	if len(writes) == 0 {
		ok, err := r.b.AdvanceCheckpoint(ctx, r.p, adv, now)
		if err != nil {
			return err
		}
		r.done(ok, adv)
		return nil
	}
	for range 64 {
		h, _, err := r.b.Head(ctx, r.p)
		if err != nil {
			return err
		}
		seq := h.MaxCommitSeq + 1
		req := &store.CommitRequest{
			ExpectedMaxSeq: h.MaxCommitSeq,
			Commit:         store.Commit{Seq: seq, CreatedAtMs: now, ActorID: BackfillClientID, ClientID: BackfillClientID, ClientCommitID: key},
			Outcome:        store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now, ActorID: BackfillClientID},
			WriterVersion:  r.c.SchemaVersion,
			Advance:        &adv,
		}
		for _, w := range writes {
			w.Row.CommitSeq = seq
			req.Rows = append(req.Rows, w)
			ch := store.Change{Table: w.Table, RowID: w.Row.RowID, Op: wire.OpDelete, Scopes: w.Row.Scopes}
			if !w.Delete {
				ch.Op, ch.RowVersion, ch.Row = wire.OpUpsert, w.Row.Version, w.Row.Payload
			}
			req.Commit.Changes = append(req.Commit.Changes, ch)
		}
		err = r.b.Commit(ctx, r.p, req)
		switch {
		case err == nil:
			r.done(true, adv)
			r.pr.Batches++
			r.pr.Rows += int64(len(writes))
			return nil
		case errors.Is(err, store.ErrHeadMoved):
			continue
		case errors.Is(err, store.ErrCheckpointSuperseded):
			r.done(false, adv)
			return nil
		case errors.Is(err, store.ErrOutcomeExists):
			// This batch landed before (a run that lost its answer): its
			// advance landed with it, unless a newer owner took over.
			c, err := r.b.GetCheckpoint(ctx, r.p, r.c.Name)
			if err != nil {
				return err
			}
			r.done(c != nil && c.OwnerEpoch == r.c.OwnerEpoch, adv)
			return nil
		default:
			return err
		}
	}
	return fmt.Errorf("backfill %s: partition too busy", r.c.Name)
}

func (r *runner) done(ok bool, adv store.CheckpointAdvance) {
	if !ok {
		r.pr.Superseded = true
		return
	}
	r.c.Watermark, r.c.Cursor = adv.Watermark, adv.Cursor
}
