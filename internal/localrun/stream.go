package localrun

import (
	"context"
	"time"

	"github.com/skyfold/syncular-lambda/internal/rtfanout"
)

// streamPollInterval is how often the runner reads the table stream
// (Lambda's event source mapping polls each shard about 4 times a second).
const streamPollInterval = 100 * time.Millisecond

// followStream makes the table's stream the hub's source of hints, as on
// AWS: a commit's first log item INSERT (what template.yaml's event
// source mapping lets through) hints its partition's seq to the hub,
// which reads the log itself — whichever process wrote the commit:
// another runner, a deployed function, a script. What the stream already
// holds is skipped: it was committed before this runner had any
// connection.
func (rn *runner) followStream(ctx context.Context, s *tableStream) error {
	skip := true
	rn.poller = &rtfanout.Poller{Streams: s.client, StreamARN: s.arn, Handle: func(ctx context.Context, recs []rtfanout.Record) error {
		if skip {
			return nil
		}
		// Duplicates and reordering are harmless: the hub reads the log.
		for _, h := range rtfanout.HintsOf(recs) {
			if h.Head {
				rn.hub.HintHead(h.Partition) // an epoch event (RotateEpoch)
			}
			if h.Seq > 0 {
				rn.hub.Hint(h.Partition, h.Seq)
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
