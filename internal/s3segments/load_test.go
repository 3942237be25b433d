package s3segments_test

import (
	"context"
	"io"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestLookupLoad is the segment-download part of issue 11's measurements
// (make load-dynamodb; skipped unless SSP2_LOAD is set; dynamostore's
// TestLoad cannot host it: s3segments imports dynamostore). The real
// engine over dynamostore and this package on DynamoDB Local publishes
// one page; then, with 0, 100, 1,000 and 3,000 further publications of
// the identical bytes by other tenants (same scope digest) and as many by
// the same tenant under other scope digests, it meters one token fetch
// (§5.4) and one direct download (§5.5): the segment Lookup alone and the
// whole authorization (plus the partition head read). Round trips and
// RCU are exact counts of what was sent (RCU estimated from item sizes by
// the AWS rules, and as DynamoDB Local reports it).
func TestLookupLoad(t *testing.T) {
	if os.Getenv("SSP2_LOAD") == "" {
		t.Skip("load measurements: set SSP2_LOAD=1 (make load-dynamodb)")
	}
	e := newEnv(t, s3segments.Options{})
	ctx := context.Background()
	ddb := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "lookload")
	if err := dynamostore.CreateTable(ctx, ddb, table); err != nil {
		t.Fatal(err)
	}
	h := enginetest.New(t, dynamostore.New(ddb, table, dynamostore.Options{}), e.segs, enginetest.Options{SignedURLs: engine.SignedURLsNative})
	h.Grants.Set("alice", engine.ScopeMap{"project_id": {"p1"}})
	c := h.Client("mine", "alice", "a")
	if r := c.Push("seed", enginetest.Upsert("tasks", "t1", c.Task("t1", "p1", "one", false), 0)); r.Status != wire.PushApplied {
		t.Fatalf("seed push %+v", r)
	}
	c.BaseURL = "https://sync.example.test/segments"
	sub := wire.Subscription{ID: "s", Table: "tasks", Scopes: enginetest.Scopes("project_id", "p1"), Cursor: -1}
	resp, err := c.Send(c.Request(nil, &wire.PullHeader{Accept: wire.AcceptExternalRows | wire.AcceptSignedURL}, []wire.Subscription{sub}))
	if err != nil {
		t.Fatal(err)
	}
	secs := enginetest.Sections(t, resp)
	if len(secs) != 1 || len(secs[0].Refs) != 1 || !secs[0].Refs[0].URL.Present {
		t.Fatal("want one signed SEGMENT_REF")
	}
	ref := secs[0].Refs[0]
	u, err := url.Parse(ref.URL.Value)
	if err != nil {
		t.Fatal(err)
	}
	tok := u.Query().Get("st")
	rc, err := e.segs.Open(ctx, ref.SegmentID)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	head, ok, err := h.Store.Head(ctx, "mine")
	if err != nil || !ok {
		t.Fatalf("head: %v %v", ok, err)
	}
	now := h.Clock.Now()
	k := func(p, epoch, digest string) store.SegmentKey {
		return store.SegmentKey{Partition: p, LogEpoch: epoch, Table: "tasks", SchemaVersion: h.Schema.Latest, MediaType: wire.MediaRows, ScopeDigest: digest, AsOfCommitSeq: 1}
	}
	pub := func(k store.SegmentKey) store.Publication {
		return store.Publication{SegmentKey: k, RowCount: 1, CreatedAtMs: now, ExpiresAtMs: now + time.Hour.Milliseconds()}
	}
	meter := func(f func(ctx context.Context) error) dynamostore.Usage {
		mctx, c := dynamostore.WithCapacity(ctx)
		if err := f(mctx); err != nil {
			t.Fatal(err)
		}
		return c.Snapshot()
	}
	own := store.PublicationFilter{Partition: "mine", LogEpoch: head.LogEpoch, ScopeDigest: ref.ScopeDigest}
	direct := engine.SegmentRequest{SegmentID: ref.SegmentID, Auth: &engine.Auth{Partition: "mine", ActorID: "alice"}, Scopes: `{"project_id":["p1"]}`}
	var base [3]dynamostore.Usage
	seeded := 0
	for _, n := range []int{0, 100, 1000, 3000} {
		if n > 0 {
			seed(t, n-seeded, func(i int) error {
				i += seeded
				if err := e.segs.Put(ctx, ref.SegmentID, body, pub(k("other-"+strconv.Itoa(i), "e-"+strconv.Itoa(i), ref.ScopeDigest)), now); err != nil {
					return err
				}
				return e.segs.Put(ctx, ref.SegmentID, body, pub(k("mine", head.LogEpoch, "d-"+strconv.Itoa(i))), now)
			})
			seeded = n
		}
		look := meter(func(ctx context.Context) error {
			seg, err := e.segs.Lookup(ctx, ref.SegmentID, own)
			if err == nil && len(seg.Publications) != 1 {
				t.Fatalf("own group: %d publications", len(seg.Publications))
			}
			return err
		})
		byToken := meter(func(ctx context.Context) error {
			_, err := h.Engine.AuthorizeSegment(ctx, engine.SegmentRequest{SegmentID: ref.SegmentID, Token: tok})
			return err
		})
		byAuth := meter(func(ctx context.Context) error {
			_, err := h.Engine.AuthorizeSegment(ctx, direct)
			return err
		})
		t.Logf("%4d other tenants + %4d other digests of this tenant (%4d publications of the segment): Lookup %d round trip(s) %.1f RCU (reported %.1f); token download %d round trip(s) %.1f RCU (reported %.1f); direct download %d round trip(s) %.1f RCU (reported %.1f)",
			n, n, 1+2*n, look.RoundTrips, look.EstRCU, look.RCU, byToken.RoundTrips, byToken.EstRCU, byToken.RCU, byAuth.RoundTrips, byAuth.EstRCU, byAuth.RCU)
		got := [3]dynamostore.Usage{look, byToken, byAuth}
		for i := range got {
			got[i].RCU = 0 // DynamoDB Local's own report is logged, not compared
		}
		if n == 0 {
			base = got
		} else if got != base {
			t.Errorf("%d: %+v, with 1 publication %+v", 1+2*n, got, base)
		}
	}
}
