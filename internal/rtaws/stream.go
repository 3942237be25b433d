package rtaws

import (
	"context"

	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Record is the part of a table stream record the fanout reads: INSERTs
// of keys (the table's stream view can be KEYS_ONLY).
type Record struct {
	Insert bool
	PK, SK string
}

// HandleStream processes one batch of stream records: a new connection
// item gets its hello (§8.1); a commit's first log item is fanned out
// (§8.2). An error fails the batch, so Lambda retries it — replays are
// safe (Fanout's conditional per-connection seq).
func (s *Service) HandleStream(ctx context.Context, recs []Record) (posts int, err error) {
	for _, r := range recs {
		if !r.Insert {
			continue
		}
		if id, ok := IsConnectionKey(r.PK, r.SK); ok {
			if err := s.Hello(ctx, id); err != nil {
				s.log().Warn("realtime: hello", "connection", id, "error", err.Error())
			}
			continue
		}
		if p, seq, ok := ds.ParseCommitKey(r.PK, r.SK); ok {
			n, err := s.Fanout(ctx, p, seq)
			posts += n
			if err != nil {
				return posts, err
			}
		}
	}
	return posts, nil
}
