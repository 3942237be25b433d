package dynamostore

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/migrate"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// formatRig is one table shared by Stores standing for builds and
// Lambda instances: a large commit at a time, and what was stored.
type formatRig struct {
	t     *testing.T
	ctx   context.Context
	table string
	p     string
	seq   int64
}

// commit writes seq+1 as a commit of 50 todo tasks (make cost's 50-op
// push) by w, through the commit point only when stopAfterLog (the
// rows are then the next reader's roll-forward), and returns the stored
// log body's format byte.
func (r *formatRig) commit(w *Store, stopAfterLog bool) byte {
	r.t.Helper()
	if _, err := w.TouchPartition(r.ctx, r.p, 1, "e"); err != nil {
		r.t.Fatal(err)
	}
	r.seq++
	changes := todoTasks(r.t, 50)
	for i := range changes {
		changes[i].RowVersion = r.seq
	}
	req := &store.CommitRequest{ExpectedMaxSeq: r.seq - 1,
		Commit:  store.Commit{Seq: r.seq, ClientID: "c", ClientCommitID: strconv.FormatInt(r.seq, 10), Changes: changes},
		Outcome: store.Outcome{Applied: true, CommitSeq: r.seq}}
	for _, ch := range changes {
		req.Rows = append(req.Rows, store.RowWrite{Table: ch.Table, Row: store.Row{RowID: ch.RowID, Version: ch.RowVersion, Scopes: ch.Scopes, Payload: ch.Row, CommitSeq: r.seq}})
	}
	crash := errors.New("injected stop after the commit point")
	w.afterLog = nil
	if stopAfterLog {
		w.afterLog = func() error { return crash }
	}
	err := w.Commit(r.ctx, r.p, req)
	w.afterLog = nil
	if stopAfterLog && !errors.Is(err, crash) || !stopAfterLog && err != nil {
		r.t.Fatalf("commit %d: %v", r.seq, err)
	}
	item, err := w.getItem(r.ctx, "test", logPK(r.p), chunkSK(r.seq, 0), nil)
	if err != nil || item == nil {
		r.t.Fatalf("log item %d: %v %v", r.seq, item, err)
	}
	d, _ := getB(item, lData)
	if len(d) == 0 {
		r.t.Fatalf("log item %d has no body", r.seq)
	}
	return d[0]
}

// read has rd read commit seq as a pull does and as roll-forward does
// (its rows, rolled forward first when the writer stopped after the
// commit point).
func (r *formatRig) read(rd *Store, seq int64) error {
	r.t.Helper()
	var got []store.Change
	err := rd.ReadLog(r.ctx, r.p, seq-1, seq, func(cm *store.Commit) bool { got = cm.Changes; return true })
	if err != nil {
		return err
	}
	if len(got) != 50 || got[0].RowVersion != seq {
		r.t.Fatalf("ReadLog of commit %d: %d changes", seq, len(got))
	}
	want := todoTasks(r.t, 50)
	ids := make([]string, len(want))
	for i := range want {
		ids[i] = want[i].RowID
	}
	rows, err := rd.GetRows(r.ctx, r.p, "tasks", ids)
	if err != nil {
		return err
	}
	for _, ch := range want {
		if row := rows[ch.RowID]; row == nil || !reflect.DeepEqual(row.Payload, ch.Row) || row.CommitSeq != seq {
			r.t.Fatalf("row %s after commit %d: %+v", ch.RowID, seq, row)
		}
	}
	return nil
}

// TestFormatLevelReadFirstWriteLater (issue 20 item 1, formats.go): on
// one table, an older build that cannot decode log format 3 serves beside
// the new build, as during a deploy's traffic shift.
//
//   - Before the migration step, the new build's large commits are stored
//     as format 2 and the older build pulls them and rolls them forward.
//   - The step (migrate.Step: the post-traffic hook and syncular-admin
//     migrate) raises the store-format level; then the new build stores
//     format 3 (what the older build could not read, which is why it
//     must wait).
//   - A new-build writer whose cached marker predates the step still
//     stores format 2 until its copy is refreshed, and a build that does
//     not read format 3 never writes it, whatever the level.
func TestFormatLevelReadFirstWriteLater(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	r := &formatRig{t: t, ctx: context.Background(), table: testenv.UniqueName(t, "fmt"), p: "fmt"}
	if err := CreateTable(r.ctx, c, r.table); err != nil {
		t.Fatal(err)
	}
	older := New(c, r.table, Options{MarkerTTL: -1, BeforeFormat: levelLogZstd}) // a build from before log format 3
	// The partition (created by newer's first commit) writes scope copies
	// from the start, so a 50-row commit is too large for one transaction
	// and takes the log-first path whose roll-forward the older build
	// must read.
	newer := New(c, r.table, Options{MarkerTTL: -1, ScopeCopiesNewPartitions: true})
	stale := New(c, r.table, Options{MarkerTTL: time.Hour})

	// The traffic shift: both builds serve, the level is not raised.
	if f := r.commit(newer, true); f != logFormat {
		t.Fatalf("before the migration step the new build stored log format %d, want %d (every build reads it)", f, logFormat)
	}
	if err := r.read(older, r.seq); err != nil {
		t.Fatalf("the older build cannot read (pull, roll forward) the new build's commit of the traffic shift: %v", err)
	}
	if f := r.commit(stale, false); f != logFormat { // and caches the marker without a level
		t.Fatalf("before the step a writer stored format %d", f)
	}

	// The post-traffic hook's step, on its own Store (another function).
	hook := New(c, r.table, Options{})
	pr, err := migrate.Step(r.ctx, hook, migrate.Plan{Version: 1})
	if err != nil || pr.FormatLevel != FormatLevel {
		t.Fatalf("migrate.Step: level %d, %v; want %d", pr.FormatLevel, err, FormatLevel)
	}
	if l, err := newer.StoredFormatLevel(r.ctx); err != nil || l != FormatLevel {
		t.Fatalf("stored level after the step: %d, %v", l, err)
	}

	if f := r.commit(newer, false); f != logFormatZstd {
		t.Fatalf("after the step the new build stored log format %d, want %d", f, logFormatZstd)
	}
	if err := r.read(newer, r.seq); err != nil {
		t.Fatalf("the new build reads its format-3 commit: %v", err)
	}
	if err := r.read(older, r.seq); !errors.Is(err, errCorrupt) {
		t.Fatalf("the older build read a format-3 commit (%v): the rig does not stand for a build that cannot", err)
	}
	if f := r.commit(stale, false); f != logFormat {
		t.Fatalf("a writer whose cached level predates the step stored format %d, want %d", f, logFormat)
	}
	if f := r.commit(older, false); f != logFormat {
		t.Fatalf("a build that does not read format 3 stored format %d at level %d", f, FormatLevel)
	}

	// A fresh instance reads the level with its first request's marker.
	if f := r.commit(New(c, r.table, Options{}), false); f != logFormatZstd {
		t.Fatalf("a new instance after the step stored format %d, want %d", f, logFormatZstd)
	}
	// The level never drops, and a build below it refuses to step.
	if l, err := older.RaiseFormatLevel(r.ctx); err == nil || l.Level != FormatLevel {
		t.Fatalf("an older build's RaiseFormatLevel: %d, %v; want the stored %d and an error", l.Level, err, FormatLevel)
	}
	if l, err := hook.StoredFormatLevel(r.ctx); err != nil || l != FormatLevel {
		t.Fatalf("stored level after an older build's raise: %d, %v", l, err)
	}
}

// TestFormatLevelTable: the table "format → level" is what FormatLevel
// and the levels say: levels 1..n, each named.
func TestFormatLevelTable(t *testing.T) {
	if FormatLevel != int64(len(storedFormats)) || levelLogZstd < 1 || levelLogZstd > FormatLevel {
		t.Fatalf("FormatLevel %d, %d formats, levelLogZstd %d", FormatLevel, len(storedFormats), levelLogZstd)
	}
	for i, name := range storedFormats {
		if name == "" || formatName(int64(i+1)) != name {
			t.Fatalf("level %d has no name", i+1)
		}
	}
}
