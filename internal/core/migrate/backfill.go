package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Transform maps one current source row to the row writes of its
// backfill (none: the row needs nothing). Writes are full rows with
// Version set; CommitSeq is stamped by the runner. A transform must be
// idempotent: a row it already rewrote comes back with no write, so a
// re-run or a catch-up writes nothing twice.
type Transform func(ctx context.Context, table string, row *store.Row) ([]store.RowWrite, error)

// BackfillOptions bound one backfill run.
type BackfillOptions struct {
	// BatchRows is how many source rows one batch reads (default 50,
	// at most MaxBatchRows): each batch is one commit.
	BatchRows int
	// Deadline, when set, is checked between batches: the run stops
	// (TimedOutNow) and a later run resumes from the stored cursor.
	Deadline func() bool
	Now      func() int64
	// MaxCatchUps bounds the catch up → activate attempts (default 64).
	MaxCatchUps int
	// head: the caller materialised the table-wide declaration in the
	// partition already (Run's walk), reading this head.
	head *store.Head
}

// MaxBatchRows bounds the rows of one backfill commit, and
// maxBatchBytes the source payload bytes a batch reads: a batch stays
// an ordinary commit within every store's limits (a DynamoDB commit past
// one transaction takes the log-then-materialize path, as a large push
// does; docs/OPERATIONS.md).
const (
	MaxBatchRows  = 500
	maxBatchBytes = 2 << 20
)

// BackfillClientID is the reserved server-command clientId (§1.5) of
// backfill commits; clients cannot use the namespace.
const BackfillClientID = `["remote-command","backfill"]`

// cursorDone marks a finished scan; the watermark then drives catch-ups.
const cursorDone = "\x00done"

// RunBackfill is the one entry of a backfill, whoever drives it (the
// deploy hook, syncular-admin migrate -backfill, a host's job): it runs
// or resumes declaration d's backfill on partition and activates it.
// With no Transform it only verifies (scans, advances, activates).
func RunBackfill(ctx context.Context, b Backend, partition string, d Declaration, o BackfillOptions) (Progress, error) {
	fn := d.Transform
	if fn == nil {
		fn = func(context.Context, string, *store.Row) ([]store.RowWrite, error) { return nil, nil }
	}
	return Backfill(ctx, b, partition, d.Name, fn, o)
}

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
	o.BatchRows = min(o.BatchRows, MaxBatchRows)
	if o.MaxCatchUps <= 0 {
		o.MaxCatchUps = 64
	}
	if o.Deadline == nil {
		o.Deadline = func() bool { return false }
	}
	if o.head == nil {
		// A declaration made table-wide (Step) becomes this partition's
		// checkpoint here, if no write of the new build made it so yet.
		h, err := b.MaterializeCheckpoints(ctx, partition, o.Now())
		if err != nil {
			return pr, fmt.Errorf("materialize checkpoints: %w", err)
		}
		o.head = &h
	}
	c, err := b.ClaimCheckpoint(ctx, partition, name, o.Now())
	if errors.Is(err, store.ErrCheckpointActivated) {
		pr.Activated++
		return pr, nil
	}
	if err != nil {
		return pr, fmt.Errorf("claim %s: %w", name, err)
	}
	// The head read with the materialisation was read before any of the
	// scan's reads: it is the first batch's head and, for a fresh scan,
	// its watermark (a commit landing since is above it and caught up).
	r := &runner{b: b, p: partition, c: c, fn: fn, o: o, pr: &pr, known: o.head}
	if err := r.scan(ctx); err != nil || pr.Superseded || pr.TimedOutNow {
		return pr, err
	}
	out, err := r.activate(ctx)
	if err != nil || pr.Superseded || pr.TimedOutNow {
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

// activate activates the checkpoint at the partition's head in one
// conditional write (store.CheckpointAdvance.Activate) once no other
// commit above the watermark changed a source table, catching up first
// when one did. The head condition keeps it correct: a commit landing
// meanwhile costs one more round (at most MaxCatchUps). On a store with
// a commit queue, a round after the first runs in the partition's
// commit turn (engine.WaitTurn), held until the activation ends: queued
// writers wait behind it instead of landing between its check and its
// write, so a busy partition cannot starve it (issue 20 item 9). A quiet
// partition activates in the first round and takes no turn; when the
// scan ended without writing, that round is the scan's last advance
// itself (activateDeferred), without reading the head first.
func (r *runner) activate(ctx context.Context) (store.ActivationOutcome, error) {
	if out, done, err := r.activateDeferred(ctx); done || err != nil {
		return out, err
	}
	var turn *engine.Turn
	defer func() { turn.Release(ctx) }()
	for round := range r.o.MaxCatchUps {
		if round > 0 && turn == nil {
			t, err := engine.WaitTurn(ctx, r.b, r.p)
			if err != nil {
				return "", fmt.Errorf("activate %s: %w", r.c.Name, err)
			}
			turn = t
		}
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
		changed, err := r.sourceChanged(ctx, h.MaxCommitSeq)
		if err != nil {
			return "", err
		}
		if changed {
			if err := r.catchUp(ctx); err != nil || r.pr.Superseded || r.pr.TimedOutNow {
				return store.Stale, err
			}
			continue
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
		if out, done, err := r.lost(ctx); done || err != nil {
			return out, err
		}
	}
	return store.Stale, nil
}

// lost reads the checkpoint after an advance wrote nothing: done when
// another owner activated it or took it over.
func (r *runner) lost(ctx context.Context) (store.ActivationOutcome, bool, error) {
	c, err := r.b.GetCheckpoint(ctx, r.p, r.c.Name)
	if err != nil {
		return "", true, err
	}
	switch {
	case c != nil && c.State == store.CheckpointActivated:
		return store.Activated, true, nil
	case c == nil || c.OwnerEpoch != r.c.OwnerEpoch:
		r.pr.Superseded = true
		return store.Stale, true, nil
	}
	return "", false, nil
}

// activateDeferred: a scan whose last batch wrote nothing left its
// advance to the activation (runner.deferred). On a quiet partition the
// activation carries it, without reading the head first: the write is
// conditioned on the head still at the watermark (no commit above it, so
// no source change), the fence and the horizon. When that does not hold
// the advance is recorded alone and the usual catch-up path decides.
func (r *runner) activateDeferred(ctx context.Context) (store.ActivationOutcome, bool, error) {
	if r.deferred == nil {
		return "", false, nil
	}
	adv := *r.deferred
	r.deferred = nil
	adv.Activate, adv.SchemaVersion = true, r.c.SchemaVersion
	ok, err := r.b.AdvanceCheckpoint(ctx, r.p, adv, r.o.Now())
	if err != nil {
		return "", false, err
	}
	if ok {
		return store.Activated, true, nil
	}
	adv.Activate, adv.SchemaVersion = false, 0
	if ok, err = r.b.AdvanceCheckpoint(ctx, r.p, adv, r.o.Now()); err != nil || ok {
		return "", false, err
	}
	return r.lost(ctx)
}

// sourceChanged reports whether a commit above the watermark, up to
// head, other than this backfill's own, changed a source table.
func (r *runner) sourceChanged(ctx context.Context, head int64) (bool, error) {
	if head <= r.c.Watermark {
		return false, nil
	}
	own := fmt.Sprintf("backfill/%s/v%d/", r.c.Name, r.c.SchemaVersion)
	changed := false
	err := r.b.ReadLog(ctx, r.p, r.c.Watermark, head, func(c *store.Commit) bool {
		if c.ClientID == BackfillClientID && strings.HasPrefix(c.ClientCommitID, own) {
			return true
		}
		for _, ch := range c.Changes {
			if slices.Contains(r.c.Sources, ch.Table) {
				changed = true
				return false
			}
		}
		return true
	})
	return changed, err
}

type runner struct {
	b  Backend
	p  string
	c  *store.Checkpoint
	fn Transform
	o  BackfillOptions
	pr *Progress
	// known is a head read before any read of the run, used once: by
	// the first batch (and a fresh scan's watermark) instead of a read.
	known *store.Head
	// deferred is the scan's last advance when that batch wrote nothing:
	// the activation records it (activateDeferred).
	deferred *store.CheckpointAdvance
}

// head returns the known head the first time, then reads it.
func (r *runner) head(ctx context.Context) (store.Head, error) {
	if h := r.known; h != nil {
		r.known = nil
		return *h, nil
	}
	h, _, err := r.b.Head(ctx, r.p)
	return h, err
}

// batchPlan is what one batch writes: built from reads made after the
// head the batch commits on, so a commit that lands never overwrites a
// newer row with a value computed from an older one.
type batchPlan struct {
	writes   []store.RowWrite
	cursor   string
	observed int64
}

// scan walks the source tables from the cursor ("<table index>:<rowId>").
func (r *runner) scan(ctx context.Context) error {
	if r.c.Cursor == "" {
		// The watermark a scan starts from: every commit at or below a
		// head read before the scan's reads is visible to the scan.
		h := r.known
		if h == nil {
			read, _, err := r.b.Head(ctx, r.p)
			if err != nil {
				return err
			}
			h = &read
		}
		r.c.Watermark = h.MaxCommitSeq
	}
	for r.c.Cursor != cursorDone {
		if r.o.Deadline() {
			r.pr.TimedOutNow = true
			return nil
		}
		ti, after, hasAfter, err := r.position()
		if err != nil {
			return err
		}
		key := fmt.Sprintf("backfill/%s/v%d/scan/%s", r.c.Name, r.c.SchemaVersion, r.c.Cursor)
		err = r.batch(ctx, key, r.c.Watermark, true, func() (batchPlan, error) {
			return r.scanBatch(ctx, ti, after, hasAfter)
		})
		if err != nil || r.pr.Superseded {
			return err
		}
	}
	return nil
}

// position decodes the cursor.
func (r *runner) position() (ti int, after string, hasAfter bool, err error) {
	if r.c.Cursor == "" {
		return 0, "", false, nil
	}
	idx, rest, ok := strings.Cut(r.c.Cursor, ":")
	if _, err := fmt.Sscan(idx, &ti); err != nil || !ok || ti < 0 || ti >= len(r.c.Sources) {
		return 0, "", false, fmt.Errorf("checkpoint %s: bad cursor %q", r.c.Name, r.c.Cursor)
	}
	return ti, rest, rest != "", nil
}

// scanBatch reads the next rows of table ti after `after` (bounded by
// rows and bytes) and plans their writes and the cursor past them.
func (r *runner) scanBatch(ctx context.Context, ti int, after string, hasAfter bool) (batchPlan, error) {
	table := r.c.Sources[ti]
	var rows []*store.Row
	size, full := 0, false
	err := r.b.ScanRows(ctx, r.p, table, after, hasAfter, func(row *store.Row) bool {
		rows = append(rows, row)
		size += len(row.Payload)
		full = len(rows) >= r.o.BatchRows || size >= maxBatchBytes
		return !full
	})
	if err != nil {
		return batchPlan{}, fmt.Errorf("scan %s: %w", table, err)
	}
	pl := batchPlan{cursor: cursorDone, observed: int64(len(rows))}
	switch {
	case full:
		pl.cursor = fmt.Sprintf("%d:%s", ti, rows[len(rows)-1].RowID)
	case ti+1 < len(r.c.Sources):
		pl.cursor = fmt.Sprintf("%d:", ti+1)
	}
	for _, row := range rows {
		ws, err := r.fn(ctx, table, row)
		if err != nil {
			return batchPlan{}, fmt.Errorf("checkpoint %s: row %q of %s: %w", r.c.Name, row.RowID, table, err)
		}
		pl.writes = append(pl.writes, ws...)
	}
	return pl, nil
}

// catchUp re-runs the transform on the source rows changed above the
// watermark by other commits than this backfill's, in batches, and
// moves the watermark to the head it read with the last one.
func (r *runner) catchUp(ctx context.Context) error {
	h, _, err := r.b.Head(ctx, r.p)
	if err != nil {
		return err
	}
	own := fmt.Sprintf("backfill/%s/v%d/", r.c.Name, r.c.SchemaVersion)
	changed := map[string]map[string]bool{}
	err = r.b.ReadLog(ctx, r.p, r.c.Watermark, h.MaxCommitSeq, func(c *store.Commit) bool {
		if c.ClientID == BackfillClientID && strings.HasPrefix(c.ClientCommitID, own) {
			// This backfill's own output: the transform is idempotent.
			return true
		}
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
		return err
	}
	type chunk struct {
		table string
		ids   []string
	}
	var chunks []chunk
	for _, table := range r.c.Sources {
		ids := make([]string, 0, len(changed[table]))
		for id := range changed[table] {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for ch := range slices.Chunk(ids, r.o.BatchRows) {
			chunks = append(chunks, chunk{table, ch})
		}
	}
	if len(chunks) == 0 {
		chunks = append(chunks, chunk{})
	}
	from := r.c.Watermark
	for i, ch := range chunks {
		if r.o.Deadline() {
			r.pr.TimedOutNow = true
			return nil
		}
		// The chunking is a function of (watermark, head): a re-run over
		// the same window cuts the same chunks under the same keys.
		key := fmt.Sprintf("backfill/%s/v%d/catchup/%d/%d/%d", r.c.Name, r.c.SchemaVersion, from, h.MaxCommitSeq, i)
		wm := from
		if i == len(chunks)-1 {
			wm = h.MaxCommitSeq
		}
		err := r.batch(ctx, key, wm, false, func() (batchPlan, error) {
			pl := batchPlan{cursor: cursorDone}
			if ch.table == "" {
				return pl, nil
			}
			rows, err := r.b.GetRows(ctx, r.p, ch.table, ch.ids)
			if err != nil {
				return pl, fmt.Errorf("read %s: %w", ch.table, err)
			}
			for _, id := range ch.ids {
				if row := rows[id]; row != nil && !row.Deleted {
					ws, err := r.fn(ctx, ch.table, row)
					if err != nil {
						return pl, fmt.Errorf("checkpoint %s: row %q of %s: %w", r.c.Name, id, ch.table, err)
					}
					pl.writes = append(pl.writes, ws...)
					pl.observed++
				}
			}
			return pl, nil
		})
		if err != nil || r.pr.Superseded {
			return err
		}
	}
	return nil
}

// batch lands one planned batch and the checkpoint's advance
// atomically: one server commit under the deterministic key, or a bare
// advance when there is nothing to write. The head is read before the
// plan's reads and the commit is conditioned on it (§2.1), so a commit
// that raced the reads fails and the batch is planned again from fresh
// reads. A superseded owner stops. With deferLast, a batch that ends
// the scan and writes nothing leaves its advance to the activation
// (runner.deferred), which records it in its own write.
func (r *runner) batch(ctx context.Context, key string, watermark int64, deferLast bool, plan func() (batchPlan, error)) error {
	for range 64 {
		h, err := r.head(ctx)
		if err != nil {
			return err
		}
		pl, err := plan()
		if err != nil {
			return err
		}
		adv := store.CheckpointAdvance{Name: r.c.Name, Epoch: r.c.OwnerEpoch, Watermark: watermark, Cursor: pl.cursor, Observed: pl.observed}
		now := r.o.Now()
		if len(pl.writes) == 0 && deferLast && pl.cursor == cursorDone {
			r.deferred = &adv
			r.c.Cursor = cursorDone
			return nil
		}
		if len(pl.writes) == 0 {
			ok, err := r.b.AdvanceCheckpoint(ctx, r.p, adv, now)
			if err != nil {
				return err
			}
			r.done(ok, adv)
			return nil
		}
		seq := h.MaxCommitSeq + 1
		if h.MaxCommitSeq == r.c.Watermark && watermark == r.c.Watermark {
			// Nothing committed since the watermark but this batch: the
			// sources are reflected up to its own commit.
			adv.Watermark = seq
		}
		req := &store.CommitRequest{
			ExpectedMaxSeq: h.MaxCommitSeq,
			Commit:         store.Commit{Seq: seq, CreatedAtMs: now, ActorID: BackfillClientID, ClientID: BackfillClientID, ClientCommitID: key},
			Outcome:        store.Outcome{Applied: true, CommitSeq: seq, RecordedAtMs: now, ActorID: BackfillClientID},
			WriterVersion:  r.c.SchemaVersion,
			Advance:        &adv,
		}
		for _, w := range pl.writes {
			w.Row.CommitSeq = seq
			req.Rows = append(req.Rows, w)
			req.Commit.Changes = append(req.Commit.Changes, w.Change())
		}
		err = r.b.Commit(ctx, r.p, req)
		switch {
		case err == nil:
			r.done(true, adv)
			r.pr.Batches++
			r.pr.Rows += int64(len(pl.writes))
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
			if c == nil || c.OwnerEpoch != r.c.OwnerEpoch {
				r.done(false, adv)
				return nil
			}
			r.c.Watermark, r.c.Cursor = c.Watermark, c.Cursor
			return nil
		default:
			return fmt.Errorf("checkpoint %s: commit batch %s: %w", r.c.Name, key, err)
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
