package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/limits"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// This file enforces the size limits of package limits before any store
// sees a request, so every store answers the same way and none is asked
// to hold a key or an item it cannot (DynamoDB would fail the request).
//
// The answers are chosen so a stock client's outbox keeps moving: a
// request-level error stops the whole push (the client retries it as is,
// forever), while a rejected PUSH_RESULT drops just that commit (§7.2), so
// everything that concerns one commit is answered per commit.

// CheckClientID is the clientId rule of /sync (§1.5), for transports that
// take a clientId outside an SSP2 request (the realtime upgrade, §8.1):
// empty is sync.invalid_request (the request decoder's answer), the
// reserved server-command namespace and an id over
// limits.MaxClientIDBytes are sync.invalid_client_id, all HTTP 400.
func CheckClientID(clientID string) error {
	if clientID == "" {
		return syncerr.New(syncerr.InvalidRequest, "clientId must be non-empty (§1.5)")
	}
	if isReservedClientID(clientID) {
		return errReservedClientID()
	}
	return checkClientIDLength(clientID)
}

// isReservedClientID: the server-command namespace of §1.5.
func isReservedClientID(id string) bool { return strings.HasPrefix(id, `["remote-command",`) }

func errReservedClientID() error {
	return syncerr.New(syncerr.InvalidClientID, "clientId uses the reserved server-command namespace (§1.5)")
}

func checkClientIDLength(id string) error {
	if n := len(id); n > limits.MaxClientIDBytes {
		// §10.2 resetClientId: the client picks a new, shorter id.
		return syncerr.New(syncerr.InvalidClientID, "clientId is %d bytes; at most %d are accepted (§1.5)", n, limits.MaxClientIDBytes)
	}
	return nil
}

// checkRequestLimits is the request-level part (§1.7): identifiers that
// are not about one commit.
func (e *Engine) checkRequestLimits(auth Auth, req *wire.Request) error {
	if len(auth.Partition) > limits.MaxPartitionBytes {
		return syncerr.New(syncerr.InvalidRequest, "the partition name is %d bytes; at most %d are served", len(auth.Partition), limits.MaxPartitionBytes)
	}
	if err := checkClientIDLength(req.Header.ClientID); err != nil {
		return err
	}
	// Work budgets (issue 11): the subscriptions and scope values one
	// request may make the server read for.
	if n := len(req.Subscriptions); n > e.limits.MaxSubscriptions {
		return syncerr.New(syncerr.InvalidRequest, "the request has %d subscriptions; at most %d are served per request", n, e.limits.MaxSubscriptions)
	}
	values := 0
	for i := range req.Subscriptions {
		for _, sc := range req.Subscriptions[i].Scopes {
			values += len(sc.Values)
		}
	}
	if values > e.limits.MaxScopeValues {
		return syncerr.New(syncerr.InvalidRequest, "the request's subscriptions name %d scope values; at most %d are served per request", values, e.limits.MaxScopeValues)
	}
	for i := range req.Subscriptions {
		s := &req.Subscriptions[i]
		if len(s.Table) > limits.MaxTableNameBytes {
			return syncerr.New(syncerr.InvalidRequest, "subscription %d names a table of %d bytes; table names have at most %d", i, len(s.Table), limits.MaxTableNameBytes)
		}
		for _, sc := range s.Scopes {
			for _, v := range sc.Values {
				if len(v) > limits.MaxScopeValueBytes {
					return syncerr.New(syncerr.InvalidRequest, "subscription %d requests a %q value of %d bytes; scope values have at most %d", i, truncate(sc.Key, 64), len(v), limits.MaxScopeValueBytes)
				}
			}
		}
	}
	return nil
}

// commitIDTooLong answers a clientCommitId no store can key an outcome
// by. It is not persisted: the answer depends on the frame alone, so
// every retry gets the same one (§2.3 idempotency holds without a record).
func commitIDTooLong(pc *wire.PushCommit) *wire.PushResult {
	if len(pc.ClientCommitID) <= limits.MaxClientCommitIDBytes {
		return nil
	}
	return &wire.PushResult{ClientCommitID: pc.ClientCommitID, Status: wire.PushRejected, Results: []wire.OpResult{{
		OpIndex: 0, Status: wire.OpError, Code: string(syncerr.InvalidRequest),
		Message: fmt.Sprintf("clientCommitId is %d bytes; at most %d are accepted", len(pc.ClientCommitID), limits.MaxClientCommitIDBytes),
	}}}
}

// checkOperationIdentifiers rejects an operation whose table name or rowId
// cannot be stored, before any row is read with it.
func checkOperationIdentifiers(pc *wire.PushCommit) *wire.OpResult {
	for i := range pc.Operations {
		op := &pc.Operations[i]
		switch {
		case len(op.Table) > limits.MaxTableNameBytes:
			// Not echoed: the name is not served and may be huge.
			return opError(i, syncerr.InvalidRequest, fmt.Sprintf("table name of %d bytes; table names have at most %d", len(op.Table), limits.MaxTableNameBytes))
		case op.RowID == "":
			// A primary key value is never empty: rowId is its text (§6.1).
			return opError(i, syncerr.InvalidRequest, "rowId is empty; every row needs a non-empty primary key value")
		case len(op.RowID) > limits.MaxRowIDBytes:
			return opError(i, syncerr.InvalidRequest, fmt.Sprintf("rowId is %d bytes; at most %d are accepted", len(op.RowID), limits.MaxRowIDBytes))
		}
	}
	return nil
}

// checkCommitSize rejects an evaluated commit that storage could not hold
// or a pull could not deliver: a scope value past its limit, a row past
// the item limit, changes past one transaction, or a table's share of the
// commit (one COMMIT frame, §4.5 never splits a commit) past one response.
// Accepting such a commit would fail every pull that reaches it.
func (e *Engine) checkCommitSize(actorID string, pc *wire.PushCommit, ev *evaluation) *wire.OpResult {
	for i := range ev.changes {
		for _, sc := range ev.changes[i].Scopes {
			if len(sc.Value) > limits.MaxScopeValueBytes {
				return opError(opIndexOf(pc, ev.changes[i].Table, ev.changes[i].RowID), syncerr.InvalidRequest,
					fmt.Sprintf("scope %q value is %d bytes; scope values have at most %d", truncate(sc.Key, 64), len(sc.Value), limits.MaxScopeValueBytes))
			}
		}
	}
	for i := range ev.rows {
		w := &ev.rows[i]
		if w.Delete {
			continue
		}
		if n := rowSize(&w.Row); n > e.limits.MaxRowBytes {
			return opError(opIndexOf(pc, w.Table, w.Row.RowID), syncerr.ConstraintViolation,
				fmt.Sprintf("row is about %d bytes; one row may hold at most %d", n, e.limits.MaxRowBytes))
		}
	}
	// frameSize's arithmetic, without building the frames: a table's
	// COMMIT frame is its fixed part plus its changes' parts; the total
	// counts each change as a frame of its own with no actor or tables.
	type tableShare struct {
		table, lastRowID string
		size             int
	}
	var buf [4]tableShare
	shares := buf[:0]
	total := 0
	for i := range ev.changes {
		ch := &ev.changes[i]
		rowLen := 0
		if ch.Op == wire.OpUpsert {
			rowLen = len(ch.Row)
		}
		cs := changeSize(ch.RowID, ch.Scopes, rowLen)
		j := slices.IndexFunc(shares, func(s tableShare) bool { return s.table == ch.Table })
		if j < 0 {
			shares = append(shares, tableShare{table: ch.Table, size: commitFixedSize(actorID) + 4 + len(ch.Table)})
			j = len(shares) - 1
		}
		shares[j].size += cs
		shares[j].lastRowID = ch.RowID
		total += commitFixedSize("") + cs
		if total > e.limits.MaxCommitBytes {
			return opError(opIndexOf(pc, ch.Table, ch.RowID), syncerr.ConstraintViolation,
				fmt.Sprintf("the commit's changes pass %d bytes, the most one commit may store; split it", e.limits.MaxCommitBytes))
		}
	}
	for _, sh := range shares {
		if sh.size > e.limits.MaxCommitFrameBytes {
			return opError(opIndexOf(pc, sh.table, sh.lastRowID), syncerr.ConstraintViolation,
				fmt.Sprintf("the commit's changes to table %q are about %d bytes, more than one pull response can deliver (%d); split it", sh.table, sh.size, e.limits.MaxCommitFrameBytes))
		}
	}
	return nil
}

// rowSize estimates a stored row from above: rowId, payload, scopes and
// fixed fields.
func rowSize(r *store.Row) int {
	n := 32 + len(r.RowID) + len(r.Payload)
	for _, s := range r.Scopes {
		n += 8 + len(s.Key) + len(s.Value)
	}
	return n
}

// opIndexOf is the last operation of pc on (table, rowID): the one whose
// write a change or row reflects.
func opIndexOf(pc *wire.PushCommit, table, rowID string) int {
	for i := len(pc.Operations) - 1; i >= 0; i-- {
		if pc.Operations[i].Table == table && pc.Operations[i].RowID == rowID {
			return i
		}
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// rejectCommit persists a terminal rejection of pc (§6.3, §6.4: the
// outcome is recorded like any other) and returns it; a commit that
// already has an outcome replays that instead.
func (e *Engine) rejectCommit(ctx context.Context, rs *reqState, pc *wire.PushCommit, rej *wire.OpResult) (*wire.PushResult, error) {
	res, retry, err := e.recordRejection(ctx, rs, pc, rs.head, &evaluation{reject: rej})
	if retry {
		// The gate moved since the entry check: this rejection does not
		// read data, but the build may no longer serve the partition; the
		// client retries (sync.schema_not_ready).
		return nil, notReady(map[string]any{"runningSchemaVersion": e.runningSchema()})
	}
	return res, err
}

// notDelivered stands in for a push result that does not fit this
// response's byte budget. It is the §6.3 cache-miss encoding, never
// persisted, because that is the one rejection stock clients keep queued
// (§7.2) rather than drop: the commit is resent, and its stored outcome,
// if it was processed, is replayed then.
func notDelivered(clientCommitID string) *wire.PushResult {
	r := cacheMiss(clientCommitID)
	r.Results[0].Message = "this commit's result did not fit the response; send it again"
	return r
}

// pushResultSize estimates an encoded PUSH_RESULT from above, conflict
// rows included.
func pushResultSize(r *wire.PushResult) int {
	n := 5 + 4 + len(r.ClientCommitID) + 1 + 9 + 4
	for i := range r.Results {
		o := &r.Results[i]
		n += 4 + 1 + 4 + len(o.Code) + 4 + len(o.Message) + 1 + 8 + 4 + len(o.ServerRow) + 4 + len(o.ConflictColumns)
	}
	return n
}

// detailsSize estimates an encoded PUSH_RESULT_DETAILS from above (0 for
// none), so the response budget counts the companion of a rejection.
func detailsSize(d *wire.PushResultDetails) int {
	if d == nil {
		return 0
	}
	n := 5 + 4 + len(d.ClientCommitID) + 4
	for i := range d.Entries {
		n += 4 + 4 + len(d.Entries[i].DetailsJSON)
	}
	return n
}
