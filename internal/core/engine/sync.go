package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Mode restricts which halves of a request a route serves.
type Mode int

const (
	// ModeSync is POST <mount>/sync: push and pull (§1.1).
	ModeSync Mode = iota
	// ModePush is POST <mount>/push: PUSH_COMMIT frames only.
	ModePush
	// ModePull is POST <mount>/pull: a PUSH_COMMIT frame is an error.
	ModePull
)

// SyncOptions carry per-request transport facts the engine needs.
type SyncOptions struct {
	Mode Mode
	// SegmentBaseURL is the absolute URL of <mount>/segments on this host,
	// used to mint native signed URLs (§5.4). Empty disables native URLs
	// for the request.
	SegmentBaseURL string
}

// Report summarizes one request for the host's log line and metrics.
type Report struct {
	WireVersion    uint16
	ClientID       string
	Commits        int // PUSH_COMMIT frames
	Applied        int
	Cached         int
	Rejected       int
	Deferred       int // push results that did not fit the response budget
	Subscriptions  int
	CommitsSent    int
	SegmentsSent   int
	BytesOut       int64
	ResetRequired  bool
	SchemaFloor    bool
	ErrorCode      string // in-band ERROR frame code, if any
	ResolverFailed bool
	// GateRefused: the serve gate refused the request (gate.go; the
	// client got sync.schema_not_ready, or its wire-2 mapping): a newer
	// build serves the partition, so a host may hand the unchanged
	// request to one instead (a client retry routed there). What this
	// build did before the refusal is what a retry meets: nothing, or
	// commits the retry replays (§2.3).
	GateRefused bool
	// LeaseIssued: the response carries a LEASE frame (§7.3.3);
	// LeaseServed: the resolver signalled an outage and the round was
	// authorized by the client's auth lease.
	LeaseIssued bool
	LeaseServed bool
	// Pulled is set when the request carried PULL_HEADER and its pull
	// half completed; Registrations are then its active subscriptions
	// (§8.7 registration at round end), SchemaVersion the request's.
	Pulled        bool
	Registrations []Registration
	SchemaVersion int32
	// LogEpoch is the partition's log epoch the request was served in.
	LogEpoch string
	// CommittedSeq is the highest commitSeq this request committed, 0
	// when it committed nothing (the realtime hub settles its feed
	// through it before a socket round ends, §8.7).
	CommittedSeq int64

	// Operational counters (metrics): commit attempts that lost the race
	// for the next commitSeq, bootstrap pages built from a row scan or
	// answered with an existing publication (§5.1), and the rows those
	// scans read against the rows the pages carried.
	CommitRacesLost int
	// Group commit (groupcommit.go): commits this request published
	// while waiting, published commits of others it landed with its own,
	// published commits it read but left out of its write (they commit
	// in their own turns), and its commits another request landed for it.
	GroupPublished, GroupMembers, GroupLeftOut, GroupedCommits int
	SegmentsBuilt                                              int
	SegmentsReused                                             int
	RowsScanned                                                int
	RowsDelivered                                              int

	gate *store.Gate // serve-gate state read at entry (gate.go)
	// gatedSeq is the highest own commit whose commit point was
	// conditioned on gate's token (gateCovered); pulledThrough the
	// highest nextCursor of an incremental section whose window was not
	// empty. gateNeedsRecheck compares them.
	gatedSeq, pulledThrough int64
}

// reqState is everything one request computes once.
type reqState struct {
	auth     Auth
	opts     SyncOptions
	version  uint16
	clientID string
	schemaV  *schema.Version
	head     store.Head
	now      int64
	client   *store.Client

	// acceptedMax is the highest commitSeq this request's pushes were
	// answered with (applied or cached): its pull must read at least that
	// far (read-after-write, §7 preamble of the 0.21+ spec).
	acceptedMax int64

	// own is the run of consecutive commits this request landed itself,
	// last the highest (noteOwn): its pull serves a window of them from
	// memory (pullState.ownWindow).
	own    []*store.Commit
	ownBuf [1]*store.Commit // own's storage for the usual one commit

	// registration is the §8.1 subscription list to persist (pulls only).
	registration    string
	hasRegistration bool

	allowedDone bool
	allowed     ScopeMap
	allowedErr  error
	// resolvedLive: the resolver answered (not a throw, not an outage),
	// so the round may issue its lease (§7.3.3); lease is the frame.
	resolvedLive bool
	lease        wire.Lease

	report *Report

	// Per-request values the response path hands out by pointer, kept
	// here so they share the request's one allocation (reqAlloc).
	cw         countingWriter
	hdr        wire.RespHeader
	clientBuf  store.Client // rs.client when it came from the cache
	clientNext store.Client // rs.client after recordClient wrote it
	regBuf     [1]Registration
	planBuf    [1]subPlan
	pull       pullState // servePull's state

	// details is the PUSH_RESULT_DETAILS companion of the push result
	// being produced (§6.3.1), written right after it.
	details *wire.PushResultDetails

	// prefetch: the first commit's rows, read with the head by
	// TouchPartitionRows (store.CommitQueue); consumed by its first
	// evaluation.
	prefetch *rowPrefetch
	// early: a commit ticket taken before the first read (queue.go
	// ticketFirst), handed to the first commit that queues.
	early *queueState
}

type rowPrefetch struct {
	pc    *wire.PushCommit
	table string
	ids   []string
	rows  map[string]*store.Row
}

// setDetails records the companion frame of the current push result.
func (rs *reqState) setDetails(d *wire.PushResultDetails) { rs.details = d }

// countingWriter tracks how many bytes the response has so far, so errors
// after the first byte go in-band (§1.1) and the byte budget can be kept.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// HandleSync serves one SSP2 request body for an authenticated caller and
// streams the response to w. A returned error means nothing was written:
// the host answers with the §10.1 JSON shape and the error's HTTP status.
// Failures after the first byte are written in-band as an ERROR frame
// (§1.6) and reported in Report.ErrorCode.
//
// The response is always encoded in the request's wire version (1, 2 or
// 3), and once that version is known every error code the client sees —
// returned, in-band or in an operation result — is one its catalog knows
// (syncerr.ForWire): a version-2 client never receives a code added by
// version 3.
func (e *Engine) HandleSync(ctx context.Context, auth Auth, body []byte, opts SyncOptions, w io.Writer) (*Report, error) {
	// Work budget (issue 11): the request ends by RequestTimeout at the
	// latest; storage calls past it fail with the context's error, which
	// storeErr answers as a retryable sync.internal_error. A caller's
	// deadline that comes first already bounds it (the host's soft
	// deadline): no context of our own then, whose only other effect
	// would be a cancellation at return, when nothing uses it any more.
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > e.limits.RequestTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.limits.RequestTimeout)
		defer cancel()
	}
	var rep *Report
	var err error
	if e.gates != nil {
		rep, err = e.handleGated(ctx, auth, body, opts, w)
	} else {
		rep, err = e.handleSync(ctx, auth, body, opts, w)
	}
	if err != nil && rep != nil {
		rep.GateRefused = rep.GateRefused || isGateRefusal(err)
	}
	if err != nil && rep.WireVersion != 0 && rep.BytesOut == 0 {
		err = errorForWire(err, rep.WireVersion)
	}
	return rep, err
}

// errorForWire returns err as a client of wire version v may receive it
// (§10.2 of that version's catalog). An error outside the catalog is an
// unexpected fault and becomes syncerr.Internal first, which is what the
// host would have answered. The original stays the cause, for logs.
func errorForWire(err error, v uint16) error {
	se := syncerr.As(err)
	if se == nil {
		se = syncerr.Internal(err)
	}
	code := syncerr.ForWire(se.Code, v)
	if code == se.Code {
		if syncerr.As(err) == nil {
			return se
		}
		return err
	}
	m := syncerr.Wrap(se, code, "%s", se.Message)
	m.Details = se.Details
	m.Status = se.Status
	return m
}

// resultForWire adapts a push result to the client's wire version: codes
// through syncerr.ForWire, and no conflictColumns below version 3 (§6.3).
// res is not modified.
func resultForWire(res *wire.PushResult, v uint16) *wire.PushResult {
	if v >= wire.Version3 || !needsAdapting(res, v) {
		return res // nothing would change: res itself (it is only read)
	}
	c := *res
	c.Results = append([]wire.OpResult(nil), res.Results...)
	for i := range c.Results {
		r := &c.Results[i]
		if r.Code != "" {
			r.Code = string(syncerr.ForWire(syncerr.Code(r.Code), v))
		}
		r.ConflictColumns = nil
	}
	return &c
}

// reqAlloc is one request's report and state in one allocation: the
// report is returned to the host, the state lives as long as the request.
type reqAlloc struct {
	rep Report
	rs  reqState
}

// needsAdapting reports whether resultForWire changes anything of res
// for a client of version v < 3: a code unknown to v, or conflictColumns.
func needsAdapting(res *wire.PushResult, v uint16) bool {
	for i := range res.Results {
		r := &res.Results[i]
		if r.ConflictColumns != nil || (r.Code != "" && syncerr.ForWire(syncerr.Code(r.Code), v) != syncerr.Code(r.Code)) {
			return true
		}
	}
	return false
}

func (e *Engine) handleSync(ctx context.Context, auth Auth, body []byte, opts SyncOptions, w io.Writer) (*Report, error) {
	ra := &reqAlloc{}
	rep := &ra.rep
	if auth.Partition == "" || auth.ActorID == "" {
		return rep, syncerr.New(syncerr.AuthRequired, "authentication required")
	}
	req, err := wire.DecodeRequest(body)
	if errors.Is(err, wire.ErrNotRequest) {
		return rep, syncerr.New(syncerr.InvalidRequest, "expected an SSP2 request message (§1.2)")
	}
	if err != nil {
		return rep, err
	}
	rep.WireVersion = req.WireVersion
	rep.ClientID = req.Header.ClientID
	rep.Commits = len(req.Commits)
	if req.Pull != nil {
		rep.Subscriptions = len(req.Subscriptions)
	}
	switch opts.Mode {
	case ModePull:
		if len(req.Commits) > 0 {
			return rep, syncerr.New(syncerr.InvalidRequest, "the pull route does not accept PUSH_COMMIT frames; use /sync or /push")
		}
	case ModePush:
		if req.Pull != nil {
			return rep, syncerr.New(syncerr.InvalidRequest, "the push route does not accept PULL_HEADER frames; use /sync or /pull")
		}
	}

	rs := &ra.rs
	rs.auth, rs.opts, rs.version, rs.clientID, rs.now, rs.report = auth, opts, req.WireVersion, req.Header.ClientID, e.now(), rep
	// §2.1: the registry entry is created on first sight and its epoch
	// compared before any other request work.
	if len(req.Commits) > 0 {
		// A partition this instance saw queuing: the ticket comes first
		// and the read below is the one in its turn (queue.go).
		if rs.early, err = e.ticketFirst(ctx, auth.Partition); err != nil {
			return rep, err
		}
		defer func() { rs.early.releaseUnused(ctx, e.store) }()
	}
	rs.head, err = e.touch(ctx, rs, req)
	if err != nil {
		return rep, storeErr(err, "read partition head")
	}
	e.queueMemo.note(auth.Partition, rs.head)
	if err := e.gateAtEntry(rs); err != nil {
		return rep, err
	}
	rep.LogEpoch = rs.head.LogEpoch
	if req.WireVersion == wire.Version1 && rs.head.EpochRequired {
		return rep, syncerr.New(syncerr.ClientWireUnsupported, "this partition's log epoch rotated; a wire version 2 client is required (§1.5)")
	}
	epochReset := false
	if req.WireVersion >= wire.Version2 {
		if !req.Header.LogEpoch.Present && len(req.Commits) > 0 {
			return rep, syncerr.New(syncerr.InvalidRequest, "epoch acquisition must not carry PUSH_COMMIT frames (§2.1)")
		}
		epochReset = !req.Header.LogEpoch.Present || req.Header.LogEpoch.Value != rs.head.LogEpoch
	}

	cw := &rs.cw
	cw.w = w
	defer func() { rep.BytesOut = cw.n }()

	// §1.6 schema floor: an unserved version processes nothing.
	v, served := e.schema.Versions[req.Header.SchemaVersion]
	if !served {
		rep.SchemaFloor = true
		enc := wire.NewEncoder(cw, req.WireVersion, wire.KindResponse)
		hdr := e.respHeader(rs, epochReset)
		hdr.RequiredSchemaVersion = wire.Some(e.schema.Latest)
		if err := enc.WriteFrame(hdr); err != nil {
			return rep, fmt.Errorf("write response header: %w", err)
		}
		return rep, enc.Close()
	}
	rs.schemaV = v
	if epochReset {
		rep.ResetRequired = true
		enc := wire.NewEncoder(cw, req.WireVersion, wire.KindResponse)
		if err := enc.WriteFrame(e.respHeader(rs, true)); err != nil {
			return rep, fmt.Errorf("write response header: %w", err)
		}
		return rep, enc.Close()
	}

	if isReservedClientID(rs.clientID) {
		return rep, errReservedClientID()
	}
	if err := e.checkRequestLimits(auth, req); err != nil {
		return rep, err
	}
	if err := e.checkClient(ctx, rs); err != nil {
		return rep, err
	}
	ops := 0
	for i := range req.Commits {
		ops += len(req.Commits[i].Operations)
	}
	if ops > e.limits.MaxOperations {
		return rep, syncerr.New(syncerr.TooManyOperations, "request carries %d operations; the cap is %d (§6.1)", ops, e.limits.MaxOperations)
	}
	var plans []subPlan
	if req.Pull != nil {
		if plans, err = e.planPull(ctx, rs, req); err != nil {
			return rep, err
		}
	}
	// §3.2 rule 3 / §3.4 step 1: resolve before the first response byte,
	// so a resolver that cannot answer fails the request with a retryable
	// error (nothing applied, nothing recorded, nothing revoked) instead
	// of forbidding commits one by one.
	// With auth leases on every round resolves, so each authorized round
	// slides its lease (§7.3.3).
	if len(req.Commits) > 0 || e.leases != nil {
		if _, err := e.allowedScopes(ctx, rs); err != nil {
			return rep, err
		}
	}
	lease, err := e.issueLease(ctx, rs)
	if err != nil {
		return rep, err
	}

	enc := wire.AcquireEncoder(cw, req.WireVersion, wire.KindResponse)
	defer enc.Release()
	if err := enc.WriteFrame(e.respHeader(rs, false)); err != nil {
		return rep, fmt.Errorf("write response header: %w", err)
	}
	if lease != nil {
		// §7.3.2: at most one LEASE, right after RESP_HEADER.
		if err := enc.WriteFrame(lease); err != nil {
			return rep, fmt.Errorf("write LEASE: %w", err)
		}
	}
	if err := e.serve(ctx, rs, req, plans, enc, cw); err != nil {
		se := syncerr.As(err)
		if se == nil || se.Entry().Category == "internal" {
			e.log.ErrorContext(ctx, "sync request failed mid-stream", "partition", auth.Partition, "error", err.Error())
		}
		if se == nil {
			se = syncerr.Internal(err)
		}
		rep.GateRefused = se.Code == syncerr.SchemaNotReady
		se = syncerr.As(errorForWire(se, rs.version))
		rep.ErrorCode = string(se.Code)
		en := se.Entry()
		ef := &wire.ErrorFrame{Code: string(se.Code), Message: se.Message, Category: en.Category, Retryable: en.Retryable, RecommendedAction: en.RecommendedAction}
		if len(se.Details) > 0 {
			ef.Details = wire.Some(wire.JSON(se.Details))
		}
		if werr := enc.WriteFrame(ef); werr != nil {
			return rep, errors.Join(err, werr)
		}
	}
	return rep, enc.Close()
}

// touch is TouchPartition. On a store with a commit queue, a push's
// first commit reads its rows in the same round trip when they are few
// and of one table (the evaluation then takes them and that head, the
// commit checking them as read: CommitRequest.ReadRows).
func (e *Engine) touch(ctx context.Context, rs *reqState, req *wire.Request) (store.Head, error) {
	q, ok := e.store.(store.CommitQueue)
	sv, known := e.schema.Versions[req.Header.SchemaVersion]
	if ok && known && len(req.Commits) > 0 {
		pc := &req.Commits[0]
		if want := wantedRows(sv, pc); len(want) == 1 {
			if table, ids := want[0].table, want[0].ids; len(ids) <= maxReadChecks {
				epoch := e.takeEpoch()
				h, rows, rowsOK, err := q.TouchPartitionRows(ctx, rs.auth.Partition, rs.now, epoch, table, ids)
				e.spareEpoch.giveBack(epoch, h, err)
				if err == nil && rowsOK {
					rs.prefetch = &rowPrefetch{pc: pc, table: table, ids: ids, rows: rows}
				}
				return h, err
			}
		}
	}
	epoch := e.takeEpoch()
	h, err := e.store.TouchPartition(ctx, rs.auth.Partition, rs.now, epoch)
	e.spareEpoch.giveBack(epoch, h, err)
	return h, err
}

// spareEpoch keeps one minted log epoch that the partition it was
// offered to did not take (the partition existed, the common case), so
// the next request's TouchPartition offers it again instead of minting
// one per request. A candidate is held by one request at a time and is
// dropped once a head shows it installed, or when the outcome is unknown
// (an error), so no two partitions are ever created with one epoch. It
// was never sent anywhere, so it is as unpredictable as a fresh one.
type spareEpoch struct {
	mu sync.Mutex
	s  string
}

func (e *Engine) takeEpoch() string {
	e.spareEpoch.mu.Lock()
	s := e.spareEpoch.s
	e.spareEpoch.s = ""
	e.spareEpoch.mu.Unlock()
	if s == "" {
		s = e.epoch()
	}
	return s
}

func (p *spareEpoch) giveBack(epoch string, h store.Head, err error) {
	if err != nil || epoch == "" || h.LogEpoch == "" || h.LogEpoch == epoch {
		return
	}
	p.mu.Lock()
	if p.s == "" {
		p.s = epoch
	}
	p.mu.Unlock()
}

// respHeader fills the request's RESP_HEADER (rs.hdr, written at once).
func (e *Engine) respHeader(rs *reqState, reset bool) *wire.RespHeader {
	h := &rs.hdr
	*h = wire.RespHeader{LatestSchemaVersion: wire.Some(e.schema.Latest)}
	if rs.version >= wire.Version2 {
		h.LogEpoch = rs.head.LogEpoch
		h.ResetRequired = reset
	}
	return h
}

// serve runs the push half then the pull half after the header is out.
func (e *Engine) serve(ctx context.Context, rs *reqState, req *wire.Request, plans []subPlan, enc *wire.Encoder, cw *countingWriter) error {
	seen := make(map[string]bool, len(req.Commits))
	deferred := false
	for i := range req.Commits {
		pc := &req.Commits[i]
		// §1.6 wants one PUSH_RESULT per commit, and conflict serverRows can
		// make them large: past the byte budget the remaining commits are
		// not processed and are answered "send again" (notDelivered). The
		// first result always goes out, so every request makes progress.
		budget := int64(e.limits.ResponseBudgetBytes)
		rs.details = nil
		var res *wire.PushResult
		if i > 0 && (deferred || cw.n > budget) {
			deferred = true
			res = notDelivered(pc.ClientCommitID)
		} else {
			var err error
			if res, err = e.pushCommit(ctx, rs, pc, seen[pc.ClientCommitID]); err != nil {
				return err
			}
			seen[pc.ClientCommitID] = true
			if res.Status != wire.PushRejected && res.CommitSeq.Present {
				rs.acceptedMax = max(rs.acceptedMax, res.CommitSeq.Value)
			}
			if i > 0 && cw.n+int64(pushResultSize(res)+detailsSize(rs.details)) > budget {
				deferred = true // processed; a resend replays its stored outcome
				res, rs.details = notDelivered(pc.ClientCommitID), nil
			}
		}
		switch {
		case deferred:
			rs.report.Deferred++
		case res.Status == wire.PushApplied:
			rs.report.Applied++
		case res.Status == wire.PushCached:
			rs.report.Cached++
		default:
			rs.report.Rejected++
		}
		if err := enc.WriteFrame(resultForWire(res, rs.version)); err != nil {
			return fmt.Errorf("write PUSH_RESULT: %w", err)
		}
		if d := rs.details; d != nil && res.Status == wire.PushRejected {
			if err := enc.WriteFrame(d); err != nil {
				return fmt.Errorf("write PUSH_RESULT_DETAILS: %w", err)
			}
		}
	}
	if req.Pull == nil {
		return e.recordClient(ctx, rs, 0, false)
	}
	minCursor, hasCursor, err := e.servePull(ctx, rs, req, plans, enc, cw)
	if err != nil {
		return err
	}
	prevReg := ""
	if rs.client != nil {
		prevReg = rs.client.Registration
	}
	rs.registration, rs.hasRegistration = registrationOf(prevReg, req.Header.SchemaVersion, req.Subscriptions), true
	if err := e.recordClient(ctx, rs, minCursor, hasCursor); err != nil {
		return err
	}
	rs.report.Pulled = true
	rs.report.SchemaVersion = req.Header.SchemaVersion
	for i := range plans {
		if p := &plans[i]; p.active {
			if rs.report.Registrations == nil {
				rs.report.Registrations = rs.regBuf[:0:len(rs.regBuf)] // the usual one fits
			}
			rs.report.Registrations = append(rs.report.Registrations, Registration{ID: p.sub.ID, Table: p.sub.Table, Requested: p.sub.Scopes, Effective: p.effective})
		}
	}
	return nil
}

// allowedScopes resolves the actor's allowed scopes at most once per
// request (§3.2 rule 3, §3.4 step 1).
func (e *Engine) allowedScopes(ctx context.Context, rs *reqState) (ScopeMap, error) {
	if !rs.allowedDone {
		rs.allowedDone = true
		var threw bool
		rs.allowed, threw, rs.allowedErr = e.resolveScopes(ctx, rs.auth, rs.clientID)
		if threw || rs.allowedErr != nil {
			rs.report.ResolverFailed = true
		}
		switch {
		case rs.allowedErr == nil:
			rs.resolvedLive = !threw
		case e.leases != nil && errors.Is(rs.allowedErr, ErrResolverUnavailable):
			// §7.3.3: the host's outage signal; the stored lease, if
			// valid, authorizes the round (never a throw: that revoked
			// above, §3.2 rule 5).
			rs.allowed, rs.allowedErr = e.leaseScopes(ctx, rs)
			rs.report.LeaseServed = rs.allowedErr == nil
		}
	}
	return rs.allowed, rs.allowedErr
}

// resolve is resolveScopes for callers that need no report.
func (e *Engine) resolve(ctx context.Context, auth Auth, clientID string) (ScopeMap, error) {
	m, _, err := e.resolveScopes(ctx, auth, clientID)
	return m, err
}

// resolveScopes calls the scope resolver and sorts its failures into the
// spec's two kinds (ScopeResolver):
//
//   - An outage (an error wrapping ErrResolverUnavailable, a timeout, or
//     an error carrying a retryable catalog code such as a throttled grant
//     read's sync.rate_limited) is not an answer: the request fails with a
//     retryable error and nothing is stored, revoked or purged, so a stock
//     client keeps its rows and its outbox and retries (§7.3.3 calls this
//     the "unavailable" signal, as opposed to a throw).
//   - Any other error is a resolver that threw (a malformed grant, a
//     host bug): it fails loud (§3.2 rule 5, §3.4 step 4) — every
//     subscription revokes and every write is forbidden, exactly like an
//     actor without any grant; threw reports it.
//
// "No grant" (an empty map, or an error wrapping ErrNoGrant) is an answer
// with the same effect. Errors that carry a non-retryable catalog code
// keep it. The returned keys are validated against the union of the scope
// variables of every served schema version (§3.2 rule 3): a key no table
// of any version declares is a server bug and fails the request with
// sync.invalid_subscription, on push-only requests too.
func (e *Engine) resolveScopes(ctx context.Context, auth Auth, clientID string) (m ScopeMap, threw bool, err error) {
	m, err = e.cfg.Resolver.ResolveScopes(ctx, auth.Partition, auth.ActorID, clientID)
	switch {
	case err == nil:
	case errors.Is(err, ErrNoGrant):
		return ScopeMap{}, false, nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		e.log.WarnContext(ctx, "scope resolution timed out; the request fails retryably", "partition", auth.Partition, "actor", auth.ActorID, "error", err.Error())
		return nil, false, syncerr.Wrap(err, syncerr.InternalError, "scope resolution timed out; retry")
	case syncerr.As(err) != nil:
		e.log.WarnContext(ctx, "scope resolver answered an error", "partition", auth.Partition, "actor", auth.ActorID, "error", err.Error())
		return nil, false, err
	case errors.Is(err, ErrResolverUnavailable):
		e.log.WarnContext(ctx, "scope resolver unavailable; the request fails retryably unless an auth lease authorizes it", "partition", auth.Partition, "actor", auth.ActorID, "error", err.Error())
		return nil, false, syncerr.Wrap(err, syncerr.InternalError, "scope resolution is unavailable; retry")
	default:
		e.log.ErrorContext(ctx, "scope resolver failed; subscriptions revoke and writes are forbidden (§3.2 rule 5)", "partition", auth.Partition, "actor", auth.ActorID, "error", err.Error())
		return ScopeMap{}, true, nil
	}
	for k := range m {
		if !e.variables[k] {
			return nil, false, syncerr.New(syncerr.InvalidSubscription, "the scope resolver returned %q, which no table of any served schema version declares (§3.2)", k)
		}
	}
	return m, false, nil
}

// storeErr turns a storage failure into a catalog error: errors that
// already carry a code (throttling → sync.rate_limited) keep it; every
// other storage failure (timeout, 5xx, a broken connection) is transient
// as far as the client can tell, so it is sync.internal_error, which is
// retryable (§10; a version-2 client receives it as sync.rate_limited,
// see syncerr.ForWire). A non-retryable code here would make a stock
// client give up on a commit because of an outage.
func storeErr(err error, what string) error {
	if se := syncerr.As(err); se != nil {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// Transient for the client: retryable, fixed public message.
		return syncerr.Internal(fmt.Errorf("%s: storage did not answer in time: %w", what, err))
	}
	// An unexpected storage fault: sync.internal_error, fixed message.
	return syncerr.Internal(fmt.Errorf("%s: %w", what, err))
}
