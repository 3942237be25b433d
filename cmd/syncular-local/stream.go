package main

import (
	"context"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
)

// streamPollInterval is how often the runner reads the table stream
// (Lambda's event source mapping polls each shard about 4 times a second).
const streamPollInterval = 100 * time.Millisecond

// followStream makes the table's stream the hub's source of commits, as
// on AWS: a commit's first log item INSERT (what template.yaml's event
// source mapping lets through) is read back from the log and handed to
// the hub, whichever process wrote it — another runner, a deployed
// function, a script. What the stream already holds is skipped: it was
// committed before this runner had any connection.
func (rn *runner) followStream(ctx context.Context, s *tableStream, st store.Store) error {
	last := map[string]int64{} // partition → highest seq handed to the hub
	skip := true
	rn.poller = &rtfanout.Poller{Streams: s.client, StreamARN: s.arn, Handle: func(ctx context.Context, recs []rtfanout.Record) error {
		for _, r := range recs {
			if r.Event != rtfanout.Insert {
				continue
			}
			p, seq, ok := ds.ParseCommitKey(r.PK, r.SK)
			if !ok || skip || seq <= last[p] {
				continue // not a commit, history, or a replayed record
			}
			var c *store.Commit
			if err := st.ReadLog(ctx, p, seq-1, seq, func(x *store.Commit) bool { c = x; return false }); err != nil {
				return err // the batch is read again on the next poll
			}
			last[p] = seq
			if c != nil { // nil: pruned before the stream caught up
				rn.hub.Notify(p, c)
			}
		}
		return nil
	}}
	_, err := rn.poller.Poll(ctx)
	skip = false
	return err
}

// runFanout polls the table stream until ctx ends (a no-op over memory,
// where commits reach the hub in-process).
func (rn *runner) runFanout(ctx context.Context) {
	if rn.poller != nil {
		rn.poller.Run(ctx, streamPollInterval)
	}
}
