package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/reactions"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// planReactions runs the host's §6.9 planner over an accepted commit:
// only for a new commit that every check accepted (rejections and
// replays return before this), with the commit's candidate rows. Its
// records ride in the commit's log entry, so they are exactly as durable
// as the commit. A planner error or an invalid record fails the push as a
// server error, and nothing is written.
func (e *Engine) planReactions(ctx context.Context, rs *reqState, pc *wire.PushCommit, ev *evaluation) ([]store.PlannedReaction, error) {
	if e.cfg.Reactions == nil {
		return nil, nil
	}
	in := &reactions.Input{
		Partition: rs.auth.Partition, ClientID: rs.clientID, ClientCommitID: pc.ClientCommitID,
		ActorID: rs.auth.ActorID,
	}
	changes, err := e.candidateChanges(ev.rows)
	if err != nil {
		return nil, err
	}
	in.Changes = changes
	ps, err := e.cfg.Reactions.Plan(ctx, in)
	if err != nil {
		return nil, syncerr.Internal(fmt.Errorf("reaction planner: %w", err))
	}
	out, err := reactions.Normalize(ps)
	if err != nil {
		return nil, syncerr.Internal(err)
	}
	return out, nil
}

// candidateChanges renders the commit's row writes, the last write of
// each row winning, as the planner's evidence.
func (e *Engine) candidateChanges(rows []store.RowWrite) ([]reactions.Change, error) {
	storageV := e.schema.Versions[e.schema.Latest]
	out := make([]reactions.Change, 0, len(rows))
	at := make(map[[2]string]int, len(rows))
	var vals []rowcodec.Value
	for i := range rows {
		w := &rows[i]
		c := reactions.Change{Table: w.Table, RowID: w.Row.RowID, Deleted: w.Delete}
		if !w.Delete {
			t, ok := storageV.Table(w.Table)
			if !ok {
				return nil, fmt.Errorf("engine: reaction evidence: table %q is not in the storage schema", w.Table)
			}
			var err error
			if vals, err = t.Codec.Decode(w.Row.Payload, vals); err != nil {
				return nil, fmt.Errorf("engine: reaction evidence: decoding %s/%s: %w", w.Table, w.Row.RowID, err)
			}
			b, err := t.Codec.RenderRow(nil, vals)
			if err != nil {
				return nil, fmt.Errorf("engine: reaction evidence: rendering %s/%s: %w", w.Table, w.Row.RowID, err)
			}
			c.Row = json.RawMessage(b)
		}
		k := [2]string{w.Table, w.Row.RowID}
		if j, ok := at[k]; ok {
			out[j] = c
			continue
		}
		at[k] = len(out)
		out = append(out, c)
	}
	return out, nil
}
