package apptest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Deployment is what the end-to-end flow drives: the three functions,
// reached the way API Gateway reaches them (in-process, or under the
// Lambda emulator), plus token minting and signed-URL fetching.
type Deployment struct {
	Schema *schema.Schema
	// Invoke sends ev to the named function ("push", "pull", "segment").
	Invoke func(t testing.TB, fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse
	// Token mints a bearer token for actor with the scopes claim.
	Token func(t testing.TB, actor string, scopes map[string][]string) string
	// FetchURL downloads a SEGMENT_REF url (an S3 presigned URL or a native
	// `st` URL of the segment function) without credentials.
	FetchURL func(t testing.TB, rawURL string) []byte
}

// Call posts an SSP2 body to fn's route with a bearer token.
func (d *Deployment) Call(t testing.TB, fn, route, token string, body []byte, hdr map[string]string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	h := map[string]string{"Content-Type": ContentType, "Accept-Encoding": "zstd, gzip"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	for k, v := range hdr {
		h[k] = v
	}
	return d.Invoke(t, fn, Event("POST", route, h, body))
}

// Sync sends one request and decodes the 200 response.
func (d *Deployment) Sync(t testing.TB, fn, route, token string, body []byte) *wire.Message {
	t.Helper()
	resp := d.Call(t, fn, route, token, body, nil)
	b := Body(t, &resp)
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: HTTP %d %s", fn, route, resp.StatusCode, b)
	}
	return Decode(t, b)
}

// Epoch acquires the partition's log epoch (§2.1) for a v2 client.
func (d *Deployment) Epoch(t testing.TB, fn, route, token, clientID string) string {
	t.Helper()
	m := d.Sync(t, fn, route, token, Request(t, wire.Version2, wire.ReqHeader{ClientID: clientID, SchemaVersion: d.Schema.Latest},
		&wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}))
	hs := Find[*wire.RespHeader](m)
	if len(hs) != 1 || hs[0].LogEpoch == "" {
		t.Fatalf("epoch acquisition: %+v", m.Frames)
	}
	return hs[0].LogEpoch
}

func (d *Deployment) table(t testing.TB, name string) *schema.Table {
	t.Helper()
	tb, ok := d.Schema.Versions[d.Schema.Latest].Table(name)
	if !ok {
		t.Fatalf("schema has no table %s", name)
	}
	return tb
}

// Task encodes a tasks row of the todo example.
func (d *Deployment) Task(t testing.TB, id, project, title string) []byte {
	return Row(t, d.table(t, "tasks"), map[string]any{"id": id, "project_id": project, "title": title, "done": false, "updated_at": 1})
}

// Project encodes a projects row of the todo example.
func (d *Deployment) Project(t testing.TB, id string) []byte {
	return Row(t, d.table(t, "projects"), map[string]any{"id": id, "name": "Project " + id, "owner_id": "alice", "archived": false, "created_at": 1})
}

// Push sends commits to the push function's /push route and requires every
// one applied.
func (d *Deployment) Push(t testing.TB, token, clientID, epoch string, commits ...wire.PushCommit) []*wire.PushResult {
	t.Helper()
	frames := make([]wire.Frame, len(commits))
	for i := range commits {
		frames[i] = &commits[i]
	}
	m := d.Sync(t, "push", "/push", token, Request(t, wire.Version2, wire.ReqHeader{ClientID: clientID, SchemaVersion: d.Schema.Latest, LogEpoch: wire.Some(epoch)}, frames...))
	res := Find[*wire.PushResult](m)
	if len(res) != len(commits) {
		t.Fatalf("push: %d results for %d commits", len(res), len(commits))
	}
	for _, r := range res {
		if r.Status != wire.PushApplied {
			t.Fatalf("push %s: status %s %+v", r.ClientCommitID, r.Status, r.Results)
		}
	}
	return res
}

// Pull sends one pull round for sub to the pull function.
func (d *Deployment) Pull(t testing.TB, token, clientID, epoch string, hdr wire.PullHeader, sub wire.Subscription) *enginetest.Section {
	t.Helper()
	m := d.Sync(t, "pull", "/pull", token, Request(t, wire.Version2, wire.ReqHeader{ClientID: clientID, SchemaVersion: d.Schema.Latest, LogEpoch: wire.Some(epoch)}, &hdr, &sub))
	secs, err := enginetest.ParseSections(m)
	if err != nil || len(secs) != 1 {
		t.Fatalf("pull: %v (%d sections)", err, len(secs))
	}
	return secs[0]
}

// Direct downloads a segment through the segment function with host auth
// and X-Syncular-Scopes (§5.5).
func (d *Deployment) Direct(t testing.TB, token, segmentID string, scopes map[string][]string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	sc, _ := json.Marshal(scopes)
	return d.Invoke(t, "segment", Event("GET", "/segments/"+url.PathEscape(segmentID), map[string]string{
		"Authorization": "Bearer " + token, "X-Syncular-Scopes": string(sc), "Accept-Encoding": "gzip",
	}, nil))
}

// NativeFetcher returns a FetchURL that serves native `st` URLs through the
// segment function, as API Gateway would route them.
func NativeFetcher(d *Deployment) func(t testing.TB, rawURL string) []byte {
	return func(t testing.TB, rawURL string) []byte {
		t.Helper()
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		resp := d.Invoke(t, "segment", Event("GET", u.EscapedPath()+"?"+u.RawQuery, nil, nil))
		b := Body(t, &resp)
		if resp.StatusCode != 200 {
			t.Fatalf("native URL fetch: HTTP %d %s", resp.StatusCode, b)
		}
		return b
	}
}

// RunFlow is the end-to-end scenario of the deployment: client A pushes;
// client B bootstraps through signed URLs and through the segment
// function, then pulls incrementally; revoked scopes revoke; a bad token
// is a 401 and a wrong content type a 415.
func RunFlow(t *testing.T, d *Deployment) {
	all := map[string][]string{"project_id": {"p1", "p2"}}
	p1 := map[string][]string{"project_id": {"p1"}}
	tokA := d.Token(t, "alice", all)
	tokB := d.Token(t, "bob", p1)

	// Client A: acquire the epoch, then push 1 project and 25 tasks.
	epoch := d.Epoch(t, "push", "/sync", tokA, "client-a")
	ops := []wire.Operation{Upsert("projects", "p1", 0, d.Project(t, "p1"))}
	for i := 0; i < 25; i++ {
		id := fmt.Sprintf("t%03d", i)
		ops = append(ops, Upsert("tasks", id, 0, d.Task(t, id, "p1", "task "+id)))
	}
	ops = append(ops, Upsert("tasks", "x1", 0, d.Task(t, "x1", "p2", "other project")))
	d.Push(t, tokA, "client-a", epoch, wire.PushCommit{ClientCommitID: "c1", Operations: ops})

	// Client B: paged bootstrap, every page a SEGMENT_REF with a URL.
	if e := d.Epoch(t, "pull", "/pull", tokB, "client-b"); e != epoch {
		t.Fatalf("epoch %q vs %q", e, epoch)
	}
	hdr := wire.PullHeader{Accept: wire.AcceptExternalRows | wire.AcceptSignedURL, LimitSnapshotRows: 10, MaxSnapshotPages: 1}
	sub := wire.Subscription{ID: "tasks-p1", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	rows := map[string]bool{}
	direct := 0
	for i := 0; sub.Cursor < 0 || sub.BootstrapState.Present; i++ {
		if i > 10 {
			t.Fatal("bootstrap did not finish")
		}
		sec := d.Pull(t, tokB, "client-b", epoch, hdr, sub)
		if sec.Start.Status != wire.SubActive || !sec.Start.Bootstrap {
			t.Fatalf("page %d: SUB_START %+v", i, sec.Start)
		}
		if len(sec.Refs) == 0 {
			t.Fatalf("page %d: no SEGMENT_REF (inline %d)", i, len(sec.Inline))
		}
		for _, ref := range sec.Refs {
			if !ref.URL.Present {
				t.Fatalf("SEGMENT_REF without url: %+v", ref)
			}
			body := d.FetchURL(t, ref.URL.Value)
			if got := segment.SegmentID(body); got != ref.SegmentID {
				t.Fatalf("signed URL bytes hash to %s, want %s", got, ref.SegmentID)
			}
			// The same segment through the segment function (§5.5).
			resp := d.Direct(t, tokB, ref.SegmentID, p1)
			if resp.StatusCode != 200 {
				t.Fatalf("direct download: HTTP %d %s", resp.StatusCode, Body(t, &resp))
			}
			if got := segment.SegmentID(Body(t, &resp)); got != ref.SegmentID {
				t.Fatalf("direct download hashes to %s", got)
			}
			direct++
			seg, err := segment.Decode(body)
			if err != nil {
				t.Fatal(err)
			}
			for _, blk := range seg.Blocks {
				for _, r := range blk {
					rows[r.Values[0].Str] = true
				}
			}
		}
		sub.Cursor, sub.BootstrapState = sec.End.NextCursor, sec.End.BootstrapState
	}
	if len(rows) != 25 || rows["x1"] {
		t.Fatalf("bootstrap delivered %d rows (x1 %v), want the 25 tasks of p1", len(rows), rows["x1"])
	}

	// A segment is not a bearer capability: an actor whose scopes do not
	// cover it is refused, and so is a request without credentials.
	tokP2 := d.Token(t, "carol", map[string][]string{"project_id": {"p2"}})
	if resp := d.Direct(t, tokP2, segIDOf(t, d, tokB, epoch, hdr), p1); resp.StatusCode != 403 {
		t.Fatalf("foreign download: HTTP %d, want 403", resp.StatusCode)
	}

	// Incremental: A edits a task, B sees exactly that commit.
	d.Push(t, tokA, "client-a", epoch, wire.PushCommit{ClientCommitID: "c2", Operations: []wire.Operation{Upsert("tasks", "t001", 1, d.Task(t, "t001", "p1", "edited"))}})
	sec := d.Pull(t, tokB, "client-b", epoch, hdr, sub)
	if sec.Start.Status != wire.SubActive || sec.Start.Bootstrap || len(sec.Commits) != 1 || len(sec.Commits[0].Changes) != 1 || sec.Commits[0].Changes[0].RowID != "t001" {
		t.Fatalf("incremental: %+v commits %d", sec.Start, len(sec.Commits))
	}
	if sec.End.NextCursor <= sub.Cursor {
		t.Fatalf("cursor did not advance: %d → %d", sub.Cursor, sec.End.NextCursor)
	}
	sub.Cursor = sec.End.NextCursor

	// Quiet pull: nothing new.
	if sec := d.Pull(t, tokB, "client-b", epoch, hdr, sub); len(sec.Commits) != 0 || sec.End.NextCursor != sub.Cursor {
		t.Fatalf("quiet pull: %d commits, cursor %d", len(sec.Commits), sec.End.NextCursor)
	}

	// Revocation: B's grant no longer covers p1.
	tokRevoked := d.Token(t, "bob", map[string][]string{"project_id": {"p2"}})
	if sec := d.Pull(t, tokRevoked, "client-b", epoch, hdr, sub); sec.Start.Status != wire.SubRevoked {
		t.Fatalf("revoked scopes: SUB_START %+v", sec.Start)
	}

	// HTTP-level errors in the §10.1 shape.
	pull := Request(t, wire.Version2, wire.ReqHeader{ClientID: "client-b", SchemaVersion: d.Schema.Latest, LogEpoch: wire.Some(epoch)}, &hdr, &sub)
	resp := d.Call(t, "pull", "/pull", tokB+"x", pull, nil)
	if resp.StatusCode != 401 || ErrorCode(Body(t, &resp)) != "sync.auth_required" {
		t.Fatalf("bad token: HTTP %d %s", resp.StatusCode, Body(t, &resp))
	}
	resp = d.Call(t, "pull", "/pull", tokB, pull, map[string]string{"Content-Type": "application/octet-stream"})
	if resp.StatusCode != 415 {
		t.Fatalf("wrong content type: HTTP %d %s", resp.StatusCode, Body(t, &resp))
	}
	// A PUSH_COMMIT on the pull route is a clear 400.
	push := Request(t, wire.Version2, wire.ReqHeader{ClientID: "client-b", SchemaVersion: d.Schema.Latest, LogEpoch: wire.Some(epoch)},
		&wire.PushCommit{ClientCommitID: "nope", Operations: []wire.Operation{Upsert("tasks", "t002", 1, d.Task(t, "t002", "p1", "x"))}})
	resp = d.Call(t, "pull", "/pull", tokB, push, nil)
	if b := Body(t, &resp); resp.StatusCode != 400 || ErrorCode(b) != "sync.invalid_request" || !strings.Contains(string(b), "/sync") {
		t.Fatalf("push on /pull: HTTP %d %s", resp.StatusCode, b)
	}
	if direct == 0 {
		t.Fatal("no direct download exercised")
	}
}

// segIDOf bootstraps a fresh subscription and returns its first segment id.
func segIDOf(t testing.TB, d *Deployment, token, epoch string, hdr wire.PullHeader) string {
	sec := d.Pull(t, token, "client-probe", epoch, hdr, wire.Subscription{ID: "probe", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1})
	if len(sec.Refs) == 0 {
		t.Fatal("probe: no SEGMENT_REF")
	}
	return sec.Refs[0].SegmentID
}
