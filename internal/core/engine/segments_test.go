package engine_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/core/canonjson"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
	"github.com/skyfold/syncular-lambda/internal/memstore"
)

// seedPartition writes the same three p1 rows into a partition.
func seedPartition(t *testing.T, h *enginetest.Harness, partition string, extra bool) *enginetest.Client {
	t.Helper()
	a := h.Client(partition, "alice", "seed-"+partition)
	ops := []wire.Operation{
		up("tasks", "t1", a.Task("t1", "p1", "one", false), 0),
		up("tasks", "t2", a.Task("t2", "p1", "two", true), 0),
		up("tasks", "t3", a.Task("t3", "p1", "three", false), 0),
	}
	if extra {
		ops = append(ops, up("tasks", "t4", a.Task("t4", "p1", "only here", false), 0))
	}
	wantApplied(t, a.Push("seed", ops...))
	return a
}

func refOf(t *testing.T, c *enginetest.Client, accept uint8, s wire.Subscription) *wire.SegmentRef {
	t.Helper()
	secs := mustPull(t, c, pullHdr(accept), s)
	if len(secs[0].Refs) != 1 {
		t.Fatalf("want one SEGMENT_REF, got %d refs %d inline", len(secs[0].Refs), len(secs[0].Inline))
	}
	return secs[0].Refs[0]
}

// §5.1 / §2.1: identical bytes in two partitions share one content address
// with one publication each; a partition never sees another's.
func TestSegmentsAcrossPartitions(t *testing.T) {
	segs := &enginetest.CountingSegments{SegmentStore: memstore.NewSegments()}
	h := enginetest.New(t, memstore.New(), segs, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	seedPartition(t, h, "A", false)
	seedPartition(t, h, "B", false)
	seedPartition(t, h, "C", true)
	refA := refOf(t, h.Client("A", "alice", "a"), acceptExternal, sub("s", "tasks", "p1", -1))
	refB := refOf(t, h.Client("B", "alice", "b"), acceptExternal, sub("s", "tasks", "p1", -1))
	refC := refOf(t, h.Client("C", "alice", "c"), acceptExternal, sub("s", "tasks", "p1", -1))
	if refA.SegmentID != refB.SegmentID {
		t.Fatalf("identical rows and scopes in two partitions: %s vs %s", refA.SegmentID, refB.SegmentID)
	}
	if refC.SegmentID == refA.SegmentID {
		t.Fatal("different rows, same segment id")
	}
	for _, p := range []string{"A", "B"} {
		head, ok, err := h.Store.Head(context.Background(), p)
		if err != nil || !ok {
			t.Fatalf("head of %s: %v %v", p, ok, err)
		}
		seg, err := h.Segments.Lookup(context.Background(), refA.SegmentID, store.PublicationFilter{Partition: p, LogEpoch: head.LogEpoch, ScopeDigest: refA.ScopeDigest})
		if err != nil {
			t.Fatal(err)
		}
		if len(seg.Publications) != 1 || seg.Publications[0].Partition != p {
			t.Fatalf("publications of %s: %+v, want one of its own", p, seg.Publications)
		}
	}
	scopes := map[string][]string{"project_id": {"p1"}}
	for _, p := range []string{"A", "B"} {
		if _, err := h.Client(p, "alice", "dl-"+p).Download(refA.SegmentID, scopes); err != nil {
			t.Fatalf("partition %s downloading its own segment: %v", p, err)
		}
	}
	// C's segment is published only under C.
	for _, p := range []string{"A", "B"} {
		_, err := h.Client(p, "alice", "x-"+p).Download(refC.SegmentID, scopes)
		wantCode(t, err, syncerr.NotFound)
	}
	// A partition the server never saw cannot see anything either.
	_, err := h.Fetch(engine.SegmentRequest{SegmentID: refA.SegmentID, Auth: &engine.Auth{Partition: "Z", ActorID: "alice"}, Scopes: `{"project_id":["p1"]}`})
	wantCode(t, err, syncerr.NotFound)
}

// §5.5: every direct download re-authorizes.
func TestSegmentDirectDownload(t *testing.T) {
	h := newHarness(t, enginetest.Options{})
	h.Grants.Set("alice", projects("p1"))
	h.Grants.Set("bob", projects("p1", "p2"))
	seedPartition(t, h, "tenant", false)
	b := h.Client("tenant", "bob", "b")
	ref := refOf(t, b, acceptExternal, sub("s", "tasks", "p1", -1))
	if ref.ScopeDigest != canonjson.ScopeDigest(map[string][]string{"project_id": {"p1"}}) {
		t.Fatalf("descriptor digest %s is not §3.5 over the effective map", ref.ScopeDigest)
	}
	fetch := func(actor, scopes string) error {
		_, err := h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Auth: &engine.Auth{Partition: "tenant", ActorID: actor}, Scopes: scopes})
		return err
	}
	for _, ok := range []string{`{"project_id":["p1"]}`, `{ "project_id" : [ "p1", "p1" ] }`} {
		if err := fetch("bob", ok); err != nil {
			t.Fatalf("scopes %s: %v", ok, err)
		}
	}
	if err := fetch("alice", `{"project_id":["p1"]}`); err != nil {
		t.Fatalf("another actor with the same effective scopes: %v", err)
	}
	// requested {p1,p2} ∩ alice's {p1} is effective {p1}: the segment's
	// digest, so authorized (§5.5 compares the effective digest).
	if err := fetch("alice", `{"project_id":["p1","p2"]}`); err != nil {
		t.Fatalf("narrowed to the segment's effective scopes: %v", err)
	}
	for name, tc := range map[string]struct {
		actor, scopes string
		code          syncerr.Code
	}{
		"digest mismatch": {"bob", `{"project_id":["p1","p2"]}`, syncerr.Forbidden},
		"revoked":         {"carol", `{"project_id":["p1"]}`, syncerr.Forbidden},
		"missing header":  {"bob", ``, syncerr.Forbidden},
		"not a scope map": {"bob", `["p1"]`, syncerr.Forbidden},
		"undeclared key":  {"bob", `{"org_id":["p1"]}`, syncerr.Forbidden},
		"no auth actor":   {"", `{"project_id":["p1"]}`, syncerr.AuthRequired},
	} {
		wantCodeNamed(t, name, fetch(tc.actor, tc.scopes), tc.code)
	}
	h.Grants.FailWith(engine.ErrNoGrant)
	wantCodeNamed(t, "no grant", fetch("bob", `{"project_id":["p1"]}`), syncerr.Forbidden)
	// A resolver that cannot answer is retryable, not a denial.
	h.Grants.Fail(true)
	wantCodeNamed(t, "resolver outage", fetch("bob", `{"project_id":["p1"]}`), syncerr.InternalError)
	h.Grants.Fail(false)
	h.Grants.Set("bob", projects("p2"))
	wantCodeNamed(t, "grant revoked after issuance", fetch("bob", `{"project_id":["p1"]}`), syncerr.Forbidden)
	h.Grants.Set("bob", projects("*"))
	if err := fetch("bob", `{"project_id":["p1"]}`); err != nil {
		t.Fatalf("wildcard grant: %v", err)
	}
	_, err := h.Fetch(engine.SegmentRequest{SegmentID: "sha256:" + strings.Repeat("0", 64), Auth: &engine.Auth{Partition: "tenant", ActorID: "bob"}, Scopes: `{"project_id":["p1"]}`})
	wantCodeNamed(t, "unknown id", err, syncerr.NotFound)
	// Expiry: past the publication TTL the segment is expired (404
	// sync.segment_expired), not forbidden.
	h.Clock.Advance(engine.DefaultSegmentTTL.Milliseconds() + 1)
	wantCodeNamed(t, "expired", fetch("bob", `{"project_id":["p1"]}`), syncerr.SegmentExpired)
	wantCodeNamed(t, "expired but unauthorized", fetch("bob", `{"project_id":["p2"]}`), syncerr.Forbidden)
	// A re-pull mints a fresh publication and the download works again.
	ref2 := refOf(t, b, acceptExternal, sub("s", "tasks", "p1", -1))
	if ref2.SegmentID != ref.SegmentID {
		t.Fatal("same rows, same pin: the rebuilt segment must have the same content address")
	}
	if err := fetch("bob", `{"project_id":["p1"]}`); err != nil {
		t.Fatalf("after re-pull: %v", err)
	}
	// Epoch rotation hides the old epoch's publications (§2.1).
	if err := h.Store.RotateEpoch(context.Background(), "tenant", "epoch-2", h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	wantCodeNamed(t, "old epoch", fetch("bob", `{"project_id":["p1"]}`), syncerr.NotFound)
}

func wantCodeNamed(t *testing.T, name string, err error, code syncerr.Code) {
	t.Helper()
	if got := enginetest.ErrCode(err); got != code {
		t.Fatalf("%s: want %s, got %v", name, code, err)
	}
}

// §5.4 native token verification: MAC, every claim, expiry with ≤ 60 s
// skew, segment binding.
func TestNativeTokenTampering(t *testing.T) {
	h := newHarness(t, enginetest.Options{SignedURLs: engine.SignedURLsNative})
	h.Grants.Set("alice", projects("p1", "p2"))
	a := seedPartition(t, h, "tenant", false)
	wantApplied(t, a.Push("p2", up("tasks", "u1", a.Task("u1", "p2", "other", false), 0)))
	a.BaseURL = "https://host.test/v1/segments/"
	ref := refOf(t, a, acceptExternal|wire.AcceptSignedURL, sub("s", "tasks", "p1", -1))
	other := refOf(t, a, acceptExternal|wire.AcceptSignedURL, sub("s", "tasks", "p2", -1))
	if !ref.URL.Present || !other.URL.Present {
		t.Fatal("no signed URLs")
	}
	tok := token(t, ref.URL.Value)
	if _, err := h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Token: tok}); err != nil {
		t.Fatalf("untampered token: %v", err)
	}
	payload, mac := splitToken(t, tok)
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "seg", "sd", "pt", "ep", "exp"} {
		if _, ok := claims[k]; !ok {
			t.Fatalf("claim %q missing from %s", k, payload)
		}
	}
	if claims["seg"] != ref.SegmentID || claims["sd"] != ref.ScopeDigest {
		t.Fatalf("claims %v do not bind segment and digest", claims)
	}
	if pt, _ := claims["pt"].(string); pt == "" || strings.Contains(pt, "tenant") || strings.Contains(string(must(base64.RawURLEncoding.DecodeString(pt))), "tenant") {
		t.Fatalf("pt %q must be an opaque partition token", pt)
	}
	// A token naming another partition, which has no publication of this
	// segment (its rows differ), authorizes nothing there (§2.1).
	h.Grants.Set("bob", projects("p1"))
	b := h.Client("tenant-b", "bob", "b")
	wantApplied(t, b.Push("b1", up("tasks", "b1", b.Task("b1", "p1", "tenant b's own", false), 0)))
	b.BaseURL = a.BaseURL
	refB := refOf(t, b, acceptExternal|wire.AcceptSignedURL, sub("s", "tasks", "p1", -1))
	if refB.SegmentID == ref.SegmentID || !refB.URL.Present {
		t.Fatal("tenant-b: want its own signed segment")
	}
	var claimsB map[string]any
	if pb, _ := splitToken(t, token(t, refB.URL.Value)); json.Unmarshal(pb, &claimsB) != nil || claimsB["pt"] == claims["pt"] {
		t.Fatalf("tenant-b claims %v", claimsB)
	}
	exp := int64(claims["exp"].(float64))
	if exp*1000 != ref.URLExpiresAtMs.Value {
		t.Fatalf("exp %d s vs urlExpiresAtMs %d", exp, ref.URLExpiresAtMs.Value)
	}
	resign := func(mut func(map[string]any)) string {
		c := map[string]any{}
		for k, v := range claims {
			c[k] = v
		}
		mut(c)
		return sign(t, c)
	}
	if resign(func(map[string]any) {}) == "" {
		t.Fatal("sign")
	}
	cases := map[string]string{
		"v changed":        resign(func(c map[string]any) { c["v"] = 1 }),
		"seg changed":      resign(func(c map[string]any) { c["seg"] = other.SegmentID }),
		"sd changed":       resign(func(c map[string]any) { c["sd"] = other.ScopeDigest }),
		"sd garbage":       resign(func(c map[string]any) { c["sd"] = "00" }),
		"pt garbage":       resign(func(c map[string]any) { c["pt"] = "0123456789abcdef0123456789abcdef" }),
		"pt of no one":     resign(func(c map[string]any) { c["pt"] = base64.RawURLEncoding.EncodeToString(make([]byte, 40)) }),
		"pt of another":    resign(func(c map[string]any) { c["pt"] = claimsB["pt"] }),
		"exp past skew":    resign(func(c map[string]any) { c["exp"] = h.Clock.Now()/1000 - 61 }),
		"mac changed":      base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(flip(mac)),
		"claims unsigned":  base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"v":3`, `"v":3 `, 1))) + "." + base64.RawURLEncoding.EncodeToString(mac),
		"no mac":           base64.RawURLEncoding.EncodeToString(payload) + ".",
		"not a token":      "garbage",
		"other key":        otherKeyToken(t, payload),
		"token of another": token(t, other.URL.Value),
	}
	for name, st := range cases {
		_, err := h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Token: st})
		code := enginetest.ErrCode(err)
		if code != syncerr.Forbidden && code != syncerr.SegmentExpired {
			t.Fatalf("%s: accepted or wrong code: %v", name, err)
		}
		if name == "exp past skew" && code != syncerr.SegmentExpired {
			t.Fatalf("expired token: %v", err)
		}
	}
	// The exp is checked with a ≤ 60 s skew allowance: 59 s late passes,
	// 61 s late fails.
	late := resign(func(c map[string]any) { c["exp"] = h.Clock.Now()/1000 - 59 })
	if _, err := h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Token: late}); err != nil {
		t.Fatalf("within skew: %v", err)
	}
	h.Clock.Advance(ref.URLExpiresAtMs.Value - h.Clock.Now() + 59_000)
	if _, err := h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Token: tok}); err != nil {
		t.Fatalf("59 s past urlExpiresAtMs (skew): %v", err)
	}
	h.Clock.Advance(2_000)
	_, err := h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Token: tok})
	wantCode(t, err, syncerr.SegmentExpired)
	// A valid token whose publication expired: segment_expired.
	fresh := resign(func(c map[string]any) { c["exp"] = h.Clock.Now()/1000 + 3600*48 })
	h.Clock.Advance(engine.DefaultSegmentTTL.Milliseconds())
	_, err = h.Fetch(engine.SegmentRequest{SegmentID: ref.SegmentID, Token: fresh})
	wantCode(t, err, syncerr.SegmentExpired)
}

func token(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	st := u.Query().Get("st")
	if st == "" {
		t.Fatalf("no st in %s", raw)
	}
	return st
}

func splitToken(t *testing.T, st string) (payload, mac []byte) {
	t.Helper()
	p, m, ok := strings.Cut(st, ".")
	if !ok {
		t.Fatalf("token %q has no dot", st)
	}
	var err error
	if payload, err = base64.RawURLEncoding.DecodeString(p); err != nil {
		t.Fatal(err)
	}
	if mac, err = base64.RawURLEncoding.DecodeString(m); err != nil {
		t.Fatal(err)
	}
	return payload, mac
}

func sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, enginetest.SigningKey)
	m.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func otherKeyToken(t *testing.T, payload []byte) string {
	m := hmac.New(sha256.New, []byte(strings.Repeat("k", 32)))
	m.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func flip(b []byte) []byte {
	c := append([]byte(nil), b...)
	c[len(c)-1] ^= 1
	return c
}

// §5.1: a second client with the same effective scopes at the same pin
// reuses the published segment without a build; other scopes build anew,
// a later head reuses it at its pin.
func TestSegmentReuse(t *testing.T) {
	segs := &enginetest.CountingSegments{SegmentStore: memstore.NewSegments()}
	h := enginetest.New(t, memstore.New(), segs, enginetest.Options{})
	grantAll(h, projects("p1", "p2"), "alice", "bob", "carol")
	a := seedPartition(t, h, "tenant", false)
	hdr := wire.PullHeader{Accept: acceptExternal, LimitSnapshotRows: 2, MaxSnapshotPages: 5}
	first := mustPull(t, h.Client("tenant", "bob", "b"), hdr, sub("s", "tasks", "p1", -1))[0]
	builds := segs.Puts()
	if builds != int64(len(first.Refs)) || builds != 2 {
		t.Fatalf("first bootstrap: %d builds for %d refs", builds, len(first.Refs))
	}
	h.Clock.Advance(1000)
	second := mustPull(t, h.Client("tenant", "carol", "c"), hdr, sub("other-id", "tasks", "p1", -1))[0]
	if segs.Puts() != builds {
		t.Fatalf("second client with the same scopes built %d new segments", segs.Puts()-builds)
	}
	for i := range first.Refs {
		if first.Refs[i].SegmentID != second.Refs[i].SegmentID || first.Refs[i].RowCursor != second.Refs[i].RowCursor {
			t.Fatalf("page %d: %+v vs %+v", i, first.Refs[i], second.Refs[i])
		}
	}
	// Different requested scopes with the same effective map also reuse.
	mustPull(t, h.Client("tenant", "alice", "a2"), hdr, wire.Subscription{ID: "s", Table: "tasks", Scopes: p1Scopes("p1", "p1"), Cursor: -1})
	if segs.Puts() != builds {
		t.Fatal("duplicate requested values changed the digest")
	}
	// Another scope map builds; so does a new pin.
	mustPull(t, h.Client("tenant", "alice", "a3"), hdr, wire.Subscription{ID: "s", Table: "tasks", Scopes: p1Scopes("p1", "p2"), Cursor: -1})
	if segs.Puts() == builds {
		t.Fatal("a different effective scope map reused a segment")
	}
	builds = segs.Puts()
	wantApplied(t, a.Push("move-pin", up("tasks", "t9", a.Task("t9", "p2", "elsewhere", false), 0)))
	// A commit after the pin no longer defeats reuse (issue 11 item 5):
	// the bootstrap is served at the old pin, still above the horizon, and
	// the incremental pull after it replays the new commit (§4.7).
	third := mustPull(t, h.Client("tenant", "bob", "b3"), hdr, sub("s", "tasks", "p1", -1))[0]
	if segs.Puts() != builds {
		t.Fatalf("a commit after the pin: %d rebuilt segments, want the live ones reused", segs.Puts()-builds)
	}
	if third.Refs[0].SegmentID != first.Refs[0].SegmentID || third.Refs[0].AsOfCommitSeq != first.Refs[0].AsOfCommitSeq ||
		third.End.NextCursor != first.Refs[0].AsOfCommitSeq {
		t.Fatalf("reuse at the earlier pin: refs %+v end %+v", third.Refs[0], third.End)
	}
	// A smaller page size never reuses a larger page (§4.2 page bound).
	builds = segs.Puts()
	small := mustPull(t, h.Client("tenant", "bob", "b4"), wire.PullHeader{Accept: acceptExternal, LimitSnapshotRows: 1, MaxSnapshotPages: 1}, sub("s", "tasks", "p1", -1))[0]
	if small.Refs[0].RowCount != 1 || segs.Puts() != builds+1 {
		t.Fatalf("limitSnapshotRows 1: page of %d rows, %d builds", small.Refs[0].RowCount, segs.Puts()-builds)
	}
}
