package conformancehost_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/skyfold/syncular-lambda/internal/conformancehost"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/schema"
	"github.com/skyfold/syncular-lambda/internal/core/segment"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// notesSchema is a driver-shaped schema (DriverSchema in driver.ts) with
// one column of every kind readRows converts.
const notesSchema = `{
  "version": 1,
  "tables": [
    {"name": "notes", "primaryKey": "id",
     "columns": [
       {"name": "id", "type": "string", "nullable": false},
       {"name": "project_id", "type": "string", "nullable": false},
       {"name": "title", "type": "string", "nullable": false},
       {"name": "done", "type": "boolean", "nullable": false},
       {"name": "rank", "type": "integer", "nullable": true},
       {"name": "weight", "type": "float", "nullable": true},
       {"name": "meta", "type": "json", "nullable": true},
       {"name": "blob", "type": "bytes", "nullable": true}
     ],
     "scopes": [{"pattern": "project:{project_id}"}]}
  ]
}`

const startMs = 1_750_000_000_000

type env struct {
	t   *testing.T
	srv *httptest.Server
	sc  *schema.Schema
}

func newEnv(t *testing.T) *env { return newEnvWith(t, conformancehost.Options{}) }

func newEnvWith(t *testing.T, o conformancehost.Options) *env {
	t.Helper()
	h := conformancehost.New(o)
	srv := httptest.NewServer(h)
	t.Cleanup(h.Close)
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("test server not on loopback: %s", srv.URL)
	}
	sc, err := schema.Parse([]byte(notesSchema))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, sc: sc}
}

func (e *env) do(method, path string, hdr http.Header, body []byte) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// create makes an instance from ServerCreateOptions JSON fields.
func (e *env) create(extra string) string {
	e.t.Helper()
	body := `{"schema": ` + notesSchema + `, "partition": "part-1", "nowMs": 1750000000000` + extra + `}`
	st, _, b := e.do(http.MethodPost, "/__conformance/instances", nil, []byte(body))
	if st != http.StatusOK {
		e.t.Fatalf("create: %d %s", st, b)
	}
	var out struct {
		ID      string   `json:"id"`
		Methods []string `json:"methods"`
		BaseURL string   `json:"baseUrl"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.ID == "" {
		e.t.Fatalf("create response %s: %v", b, err)
	}
	for _, m := range []string{"setAllowedScopes", "readRows", "prune", "fetchSegmentUrl", "advanceClock"} {
		if !contains(out.Methods, m) {
			e.t.Errorf("methods lack %s: %v", m, out.Methods)
		}
	}
	if contains(out.Methods, "connectRealtime") {
		e.t.Errorf("methods advertise unsupported connectRealtime")
	}
	if out.BaseURL != e.srv.URL+"/i/"+out.ID {
		e.t.Errorf("baseUrl %q", out.BaseURL)
	}
	return out.ID
}

// control calls a control method; it returns the status and raw body.
func (e *env) control(id, method string, args ...any) (int, []byte) {
	e.t.Helper()
	if args == nil {
		args = []any{}
	}
	b, err := json.Marshal(args)
	if err != nil {
		e.t.Fatal(err)
	}
	st, _, out := e.do(http.MethodPost, "/i/"+id+"/control/"+method, nil, b)
	return st, out
}

// call invokes a control method that must succeed and decodes its result.
func (e *env) call(id, method string, result any, args ...any) {
	e.t.Helper()
	st, b := e.control(id, method, args...)
	if st != http.StatusOK {
		e.t.Fatalf("%s: %d %s", method, st, b)
	}
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		e.t.Fatalf("%s: %s: %v", method, b, err)
	}
	if result != nil {
		if err := json.Unmarshal(env.Result, result); err != nil {
			e.t.Fatalf("%s result %s: %v", method, env.Result, err)
		}
	}
}

func (e *env) callInt(id, method string, args ...any) int64 {
	e.t.Helper()
	var n int64
	e.call(id, method, &n, args...)
	return n
}

// client speaks SSP2 to one instance over HTTP.
type client struct {
	e      *env
	id     string
	actor  string
	cid    string
	epoch  string
	accept uint8
}

func (e *env) client(id, actor, cid string) *client {
	c := &client{e: e, id: id, actor: actor, cid: cid, accept: wire.AcceptInlineRows}
	resp := c.send(nil, &wire.PullHeader{Accept: c.accept}, nil)
	hdr := resp.Frames[0].(*wire.RespHeader)
	if !hdr.ResetRequired || hdr.LogEpoch == "" {
		e.t.Fatalf("epoch acquisition: %+v", hdr)
	}
	c.epoch = hdr.LogEpoch
	return c
}

func (c *client) body(commits []wire.PushCommit, pull *wire.PullHeader, subs []wire.Subscription) []byte {
	c.e.t.Helper()
	m := &wire.Message{WireVersion: wire.Version2, Kind: wire.KindRequest}
	h := &wire.ReqHeader{ClientID: c.cid, SchemaVersion: 1}
	if c.epoch != "" {
		h.LogEpoch = wire.Some(c.epoch)
	}
	m.Frames = append(m.Frames, h)
	for i := range commits {
		m.Frames = append(m.Frames, &commits[i])
	}
	if pull != nil {
		m.Frames = append(m.Frames, pull)
		for i := range subs {
			m.Frames = append(m.Frames, &subs[i])
		}
	}
	b, err := wire.Encode(m)
	if err != nil {
		c.e.t.Fatalf("encode request: %v", err)
	}
	return b
}

func (c *client) post(body []byte) (int, http.Header, []byte) {
	hdr := http.Header{}
	hdr.Set("Content-Type", httpapi.ContentType)
	if c.actor != "" {
		hdr.Set("X-Actor", c.actor)
	}
	return c.e.do(http.MethodPost, "/i/"+c.id+"/sync", hdr, body)
}

func (c *client) send(commits []wire.PushCommit, pull *wire.PullHeader, subs []wire.Subscription) *wire.Message {
	c.e.t.Helper()
	st, hdr, b := c.post(c.body(commits, pull, subs))
	if st != http.StatusOK || hdr.Get("Content-Type") != httpapi.ContentType {
		c.e.t.Fatalf("sync: %d %s %s", st, hdr.Get("Content-Type"), b)
	}
	m, err := wire.Decode(b)
	if err != nil {
		c.e.t.Fatalf("decode response: %v", err)
	}
	for _, f := range m.Frames {
		if ef, ok := f.(*wire.ErrorFrame); ok {
			c.e.t.Fatalf("in-band error %s: %s", ef.Code, ef.Message)
		}
	}
	return m
}

func (c *client) pull(sub wire.Subscription, accept uint8) *wire.Message {
	c.e.t.Helper()
	return c.send(nil, &wire.PullHeader{Accept: accept}, []wire.Subscription{sub})
}

func sub(id, project string, cursor int64) wire.Subscription {
	return wire.Subscription{ID: id, Table: "notes", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}, Cursor: cursor}
}

func (e *env) note(id, project, title string, rank int64, blob []byte) []byte {
	e.t.Helper()
	t, _ := e.sc.Versions[1].Table("notes")
	row := []rowcodec.Value{{Str: id}, {Str: project}, {Str: title}, {Bool: rank%2 == 0}, {Int: rank}, {Float: 1.5}, {Str: `{"k":[1,2]}`}, {Bytes: blob}}
	if blob == nil {
		row[7] = rowcodec.Value{Null: true}
		row[5] = rowcodec.Value{Null: true}
	}
	b, err := t.Codec.Append(nil, row)
	if err != nil {
		e.t.Fatalf("encode row: %v", err)
	}
	return b
}

func upsert(rowID string, payload []byte) wire.Operation {
	return wire.Operation{Table: "notes", RowID: rowID, Op: wire.OpUpsert, Payload: wire.Some(payload)}
}

func (c *client) push(commitID string, ops ...wire.Operation) *wire.PushResult {
	c.e.t.Helper()
	m := c.send([]wire.PushCommit{{ClientCommitID: commitID, Operations: ops}}, nil, nil)
	for _, f := range m.Frames {
		if r, ok := f.(*wire.PushResult); ok {
			return r
		}
	}
	c.e.t.Fatalf("no PUSH_RESULT")
	return nil
}

func frames[T wire.Frame](m *wire.Message) []T {
	var out []T
	for _, f := range m.Frames {
		if x, ok := f.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type rowState struct {
	RowID   string            `json:"rowId"`
	Version int64             `json:"version"`
	Values  map[string]any    `json:"values"`
	Scopes  map[string]string `json:"scopes"`
}

type bytesResult struct {
	OK    bool `json:"ok"`
	Bytes *struct {
		U8 string `json:"$u8"`
	} `json:"bytes"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (r bytesResult) data(t *testing.T) []byte {
	t.Helper()
	if !r.OK || r.Bytes == nil {
		t.Fatalf("BytesResult not ok: %+v", r.Error)
	}
	b, err := base64.StdEncoding.DecodeString(r.Bytes.U8)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInfo(t *testing.T) {
	e := newEnv(t)
	st, _, b := e.do(http.MethodGet, "/__conformance/info", nil, nil)
	if st != http.StatusOK {
		t.Fatalf("info: %d %s", st, b)
	}
	var info struct {
		Name         string   `json:"name"`
		Capabilities []string `json:"capabilities"`
		Unsupported  []string `json:"unsupported"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "syncular-lambda" || !contains(info.Capabilities, "signed-urls") || !contains(info.Capabilities, "blobs") || !contains(info.Capabilities, "blob-presign") || !contains(info.Capabilities, "crdt") || contains(info.Unsupported, "crdt") || contains(info.Unsupported, "realtime") || !contains(info.Unsupported, "sqlite-image") {
		t.Fatalf("info %s", b)
	}
}

func TestPushPullReadRows(t *testing.T) { forStores(t, testPushPullReadRows) }

func testPushPullReadRows(t *testing.T, e *env) {
	id := e.create("")
	e.call(id, "setAllowedScopes", nil, "actor-a", map[string][]string{"project_id": {"p1"}})
	c := e.client(id, "actor-a", "client-a")

	if r := c.push("c1", upsert("n1", e.note("n1", "p1", "one", 2, []byte{0xde, 0xad})), upsert("n2", e.note("n2", "p1", "two", 3, nil))); r.Status != wire.PushApplied {
		t.Fatalf("push: %+v", r)
	}
	if r := c.push("c2", upsert("x1", e.note("x1", "p2", "other", 1, nil))); r.Status != wire.PushRejected {
		t.Fatalf("push outside allowed scopes: %+v", r)
	}
	if got := e.callInt(id, "getMaxCommitSeq"); got != 1 {
		t.Fatalf("getMaxCommitSeq = %d", got)
	}

	var rows []rowState
	e.call(id, "readRows", &rows, "notes")
	want := `[{"rowId":"n1","scopes":{"project_id":"p1"},"values":{"blob":{"$bytes":"dead"},"done":true,"id":"n1","meta":"{\"k\":[1,2]}","project_id":"p1","rank":2,"title":"one","weight":1.5},"version":1},` +
		`{"rowId":"n2","scopes":{"project_id":"p1"},"values":{"blob":null,"done":false,"id":"n2","meta":"{\"k\":[1,2]}","project_id":"p1","rank":3,"title":"two","weight":null},"version":1}]`
	if got, _ := json.Marshal(rows); !jsonEqual(t, got, []byte(want)) {
		t.Fatalf("readRows\n got %s\nwant %s", got, want)
	}

	// Bootstrap pull (inline rows lane) matches the stored rows.
	m := c.pull(sub("s", "p1", -1), wire.AcceptInlineRows)
	inl := frames[*wire.SegmentInline](m)
	if len(inl) != 1 {
		t.Fatalf("want one inline segment, got %d frames", len(m.Frames))
	}
	seg, err := segment.Decode(inl[0].Payload)
	if err != nil || seg.Rows() != 2 {
		t.Fatalf("segment: %v rows=%d", err, seg.Rows())
	}
	if v := seg.Blocks[0][0].Values[0].Str; v != "n1" {
		t.Fatalf("first row %q", v)
	}
	end := frames[*wire.SubEnd](m)
	if len(end) != 1 || end[0].NextCursor != 1 {
		t.Fatalf("SUB_END %+v", end)
	}

	// An update bumps the server version readRows reports.
	if r := c.push("c3", wire.Operation{Table: "notes", RowID: "n2", Op: wire.OpUpsert, BaseVersion: wire.Some[int64](1), Payload: wire.Some(e.note("n2", "p1", "two!", 3, nil))}); r.Status != wire.PushApplied {
		t.Fatalf("update: %+v", r)
	}
	e.call(id, "readRows", &rows, "notes")
	if rows[1].Version != 2 || rows[1].Values["title"] != "two!" {
		t.Fatalf("after update: %+v", rows[1])
	}

	// The handleSyncRequest control method is the same endpoint.
	var br bytesResult
	e.call(id, "handleSyncRequest", &br, "actor-a", map[string]string{"$u8": base64.StdEncoding.EncodeToString(c.body(nil, &wire.PullHeader{Accept: wire.AcceptInlineRows}, []wire.Subscription{sub("s", "p1", 1)}))})
	resp, err := wire.Decode(br.data(t))
	if err != nil || len(frames[*wire.Commit](resp)) != 1 {
		t.Fatalf("handleSyncRequest: %v %+v", err, resp)
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func TestSyncErrorsAreJSON(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	c := &client{e: e, id: id, cid: "anon"}
	st, hdr, b := c.post(c.body(nil, &wire.PullHeader{Accept: wire.AcceptInlineRows}, nil))
	var body struct {
		Code     string `json:"code"`
		Category string `json:"category"`
	}
	if st != http.StatusUnauthorized || hdr.Get("Content-Type") != "application/json" || json.Unmarshal(b, &body) != nil || body.Code != "sync.auth_required" {
		t.Fatalf("missing X-Actor: %d %s", st, b)
	}
	c.actor = "actor-a"
	st, _, b = c.post([]byte("not ssp2"))
	if st < 400 || json.Unmarshal(b, &body) != nil || body.Code == "" {
		t.Fatalf("garbage body: %d %s", st, b)
	}
	var br bytesResult
	e.call(id, "handleSyncRequest", &br, "actor-a", map[string]string{"$u8": "AAAA"})
	if br.OK || br.Error == nil || br.Error.Code == "" {
		t.Fatalf("handleSyncRequest on garbage: %+v", br)
	}
}

func TestClockAndPrune(t *testing.T) { forStores(t, testClockAndPrune) }

func testClockAndPrune(t *testing.T, e *env) {
	id := e.create("")
	if got := e.callInt(id, "nowMs"); got != startMs {
		t.Fatalf("nowMs = %d", got)
	}
	e.call(id, "advanceClock", nil, 1500)
	if got := e.callInt(id, "nowMs"); got != startMs+1500 {
		t.Fatalf("nowMs after advance = %d", got)
	}
	// Before any traffic the partition does not exist.
	if h := e.callInt(id, "prune"); h != 0 || e.callInt(id, "getHorizonSeq") != 0 || e.callInt(id, "getMaxCommitSeq") != 0 {
		t.Fatalf("empty partition prune/horizon = %d", h)
	}

	e.call(id, "setAllowedScopes", nil, "seed", map[string][]string{"project_id": {"*"}})
	c := e.client(id, "seed", "seed-client")
	for i, rid := range []string{"a", "b", "c"} {
		if r := c.push("p"+rid, upsert(rid, e.note(rid, "p1", "t", int64(i), nil))); r.Status != wire.PushApplied {
			t.Fatalf("push: %+v", r)
		}
	}
	maxSeq := e.callInt(id, "getMaxCommitSeq")
	if maxSeq != 3 {
		t.Fatalf("maxCommitSeq = %d", maxSeq)
	}
	// Default floors (1000 retained commits) keep everything.
	if h := e.callInt(id, "prune"); h != 0 {
		t.Fatalf("default prune moved the horizon to %d", h)
	}
	e.call(id, "advanceClock", nil, 3_600_000)
	h := e.callInt(id, "prune", map[string]int64{"activeWindowMs": 0, "ageForceMs": 0, "minRetainedCommits": 0})
	if h != maxSeq || e.callInt(id, "getHorizonSeq") != maxSeq {
		t.Fatalf("aggressive prune horizon = %d, want %d", h, maxSeq)
	}
	// A cursor below the horizon resets; a cursor at it pulls on.
	m := c.pull(sub("s", "p1", 1), wire.AcceptInlineRows)
	if st := frames[*wire.SubStart](m); len(st) != 1 || st[0].Status != wire.SubReset {
		t.Fatalf("below-horizon cursor: %+v", st)
	}
	m = c.pull(sub("s", "p1", maxSeq), wire.AcceptInlineRows)
	if st := frames[*wire.SubStart](m); len(st) != 1 || st[0].Status != wire.SubActive {
		t.Fatalf("cursor at horizon: %+v", st)
	}
}

func TestSignedURLs(t *testing.T) { forStores(t, testSignedURLs) }

func testSignedURLs(t *testing.T, e *env) {
	id := e.create(`, "limits": {"inlineSegmentMaxBytes": 0}, "signedUrls": {"ttlSeconds": 900}`)
	e.call(id, "setAllowedScopes", nil, "actor-a", map[string][]string{"project_id": {"p1"}})
	c := e.client(id, "actor-a", "client-a")
	c.push("c1", upsert("n1", e.note("n1", "p1", "one", 1, []byte{1, 2, 3})))

	// Bit 3: the descriptor carries a native signed URL back to this host.
	m := c.pull(sub("s", "p1", -1), wire.AcceptInlineRows|wire.AcceptExternalRows|wire.AcceptSignedURL)
	refs := frames[*wire.SegmentRef](m)
	if len(refs) != 1 || !refs[0].URL.Present {
		t.Fatalf("want one SEGMENT_REF with url, got %+v", refs)
	}
	ref := refs[0]
	prefix := e.srv.URL + "/i/" + id + "/segments/"
	if !strings.HasPrefix(ref.URL.Value, prefix) || !strings.Contains(ref.URL.Value, "?st=") {
		t.Fatalf("url %q does not point back at %s", ref.URL.Value, prefix)
	}
	if ref.URLExpiresAtMs.Value != (startMs/1000+900)*1000 {
		t.Fatalf("urlExpiresAtMs = %d", ref.URLExpiresAtMs.Value)
	}

	// CDN role through the control seam.
	var br bytesResult
	e.call(id, "fetchSegmentUrl", &br, ref.URL.Value)
	viaControl := br.data(t)
	if segment.SegmentID(viaControl) != ref.SegmentID || int64(len(viaControl)) != ref.ByteLength {
		t.Fatalf("fetched bytes do not match the content address")
	}
	// The same URL over plain HTTP, no X-Actor.
	u, _ := url.Parse(ref.URL.Value)
	st, _, viaGet := e.do(http.MethodGet, u.RequestURI(), nil, nil)
	if st != http.StatusOK || !bytes.Equal(viaGet, viaControl) {
		t.Fatalf("GET signed url: %d (%d bytes)", st, len(viaGet))
	}
	// Tampered token and foreign URL hosts are refused.
	e.call(id, "fetchSegmentUrl", &br, strings.Replace(ref.URL.Value, "st=", "st=x", 1))
	if br.OK || br.Error.Code != "sync.forbidden" {
		t.Fatalf("tampered token: %+v", br)
	}
	e.call(id, "fetchSegmentUrl", &br, "http://127.0.0.1:1/i/other/segments/"+ref.SegmentID+"?st=abc")
	if br.OK || br.Error.Code != "sync.not_found" {
		t.Fatalf("foreign url: %+v", br)
	}

	// TTL 0: URLs are born expired; past the 60 s skew the host refuses.
	e.call(id, "setSignedUrlTtlSeconds", nil, 0)
	m = c.pull(sub("s", "p1", -1), wire.AcceptInlineRows|wire.AcceptExternalRows|wire.AcceptSignedURL)
	ref = frames[*wire.SegmentRef](m)[0]
	if ref.URLExpiresAtMs.Value != startMs {
		t.Fatalf("ttl 0 urlExpiresAtMs = %d", ref.URLExpiresAtMs.Value)
	}
	e.call(id, "advanceClock", nil, 61_000)
	e.call(id, "fetchSegmentUrl", &br, ref.URL.Value)
	if br.OK || br.Error.Code != "sync.segment_expired" {
		t.Fatalf("expired url: %+v", br)
	}
}

func TestDirectSegmentDownload(t *testing.T) { forStores(t, testDirectSegmentDownload) }

func testDirectSegmentDownload(t *testing.T, e *env) {
	id := e.create(`, "limits": {"inlineSegmentMaxBytes": 0}`)
	e.call(id, "setAllowedScopes", nil, "actor-a", map[string][]string{"project_id": {"p1"}})
	e.call(id, "setAllowedScopes", nil, "actor-b", map[string][]string{"project_id": {"p2"}})
	c := e.client(id, "actor-a", "client-a")
	c.push("c1", upsert("n1", e.note("n1", "p1", "one", 1, nil)))
	m := c.pull(sub("s", "p1", -1), wire.AcceptExternalRows|wire.AcceptSignedURL)
	refs := frames[*wire.SegmentRef](m)
	if len(refs) != 1 || refs[0].URL.Present {
		t.Fatalf("want one url-less SEGMENT_REF (no signed URLs configured), got %+v", refs)
	}
	path := "/i/" + id + "/segments/" + refs[0].SegmentID
	hdr := func(actor string) http.Header {
		h := http.Header{}
		h.Set("X-Actor", actor)
		h.Set("X-Syncular-Scopes", `{"project_id":["p1"]}`)
		return h
	}
	st, _, b := e.do(http.MethodGet, path, hdr("actor-a"), nil)
	if st != http.StatusOK || segment.SegmentID(b) != refs[0].SegmentID {
		t.Fatalf("direct download: %d %s", st, b)
	}
	var br bytesResult
	e.call(id, "downloadSegment", &br, "actor-a", refs[0].SegmentID, `{"project_id":["p1"]}`)
	if !bytes.Equal(br.data(t), b) {
		t.Fatal("downloadSegment differs from GET")
	}
	// Re-authorized per request: another actor's grants do not cover it.
	if st, _, b := e.do(http.MethodGet, path, hdr("actor-b"), nil); st != http.StatusForbidden {
		t.Fatalf("foreign actor: %d %s", st, b)
	}
	// A resolver that throws fails loud (§3.2 rule 5, as production
	// answers a malformed grant): the download is a decided denial.
	e.call(id, "setResolverFailing", nil, true)
	if st, _, b := e.do(http.MethodGet, path, hdr("actor-a"), nil); st != http.StatusForbidden {
		t.Fatalf("failing resolver: %d %s", st, b)
	}
	e.call(id, "setResolverFailing", nil, false)
	// fetchSegmentUrl without signed URLs configured is a clean failure.
	e.call(id, "fetchSegmentUrl", &br, e.srv.URL+path+"?st=x")
	if br.OK || br.Error.Code != "sync.not_found" {
		t.Fatalf("fetchSegmentUrl without signedUrls: %+v", br)
	}
}

func TestBackupRestoreAndIdempotencyFault(t *testing.T) {
	forStores(t, testBackupRestoreAndIdempotencyFault)
}

func testBackupRestoreAndIdempotencyFault(t *testing.T, e *env) {
	id := e.create("")
	e.call(id, "setAllowedScopes", nil, "actor-a", map[string][]string{"project_id": {"p1"}})
	c := e.client(id, "actor-a", "client-a")
	c.push("c1", upsert("before", e.note("before", "p1", "kept", 1, nil)))
	e.call(id, "captureBackup", nil)
	c.push("c2", upsert("lost", e.note("lost", "p1", "gone", 1, nil)))

	// One injected unreadable idempotency record: retryable, nothing applied.
	e.call(id, "failNextIdempotencyLookup", nil)
	r := c.push("c3", upsert("later", e.note("later", "p1", "x", 1, nil)))
	if r.Status != wire.PushRejected || r.Results[0].Code != "sync.idempotency_cache_miss" || !r.Results[0].Retryable {
		t.Fatalf("cache miss: %+v", r)
	}
	if got := e.callInt(id, "getMaxCommitSeq"); got != 2 {
		t.Fatalf("maxCommitSeq after cache miss = %d", got)
	}

	e.call(id, "restoreBackup", nil)
	var rows []rowState
	e.call(id, "readRows", &rows, "notes")
	if len(rows) != 1 || rows[0].RowID != "before" {
		t.Fatalf("restored rows: %+v", rows)
	}
	if got := e.callInt(id, "getMaxCommitSeq"); got != 1 {
		t.Fatalf("restored maxCommitSeq = %d", got)
	}
	// The old epoch now answers resetRequired with a new epoch.
	m := c.send(nil, &wire.PullHeader{Accept: wire.AcceptInlineRows}, nil)
	hdr := m.Frames[0].(*wire.RespHeader)
	if !hdr.ResetRequired || hdr.LogEpoch == c.epoch {
		t.Fatalf("after restore: %+v", hdr)
	}
	c.epoch = hdr.LogEpoch
	if r := c.push("c4", upsert("offline", e.note("offline", "p1", "replayed", 1, nil))); r.Status != wire.PushApplied {
		t.Fatalf("push after restore: %+v", r)
	}
	e.call(id, "readRows", &rows, "notes")
	if len(rows) != 2 || rows[1].RowID != "offline" {
		t.Fatalf("rows after replay: %+v", rows)
	}
}

func TestControlErrors(t *testing.T) {
	e := newEnv(t)
	id := e.create("")
	type errBody struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	expect := func(st int, b []byte, wantStatus int, wantCode string) {
		t.Helper()
		var eb errBody
		if st != wantStatus || json.Unmarshal(b, &eb) != nil || eb.Error.Code != wantCode || eb.Error.Message == "" {
			t.Fatalf("got %d %s, want %d %s", st, b, wantStatus, wantCode)
		}
	}
	st, b := e.control("nope", "nowMs")
	expect(st, b, http.StatusNotFound, "conformance.unknown_instance")
	st, _, b = e.do(http.MethodPost, "/i/nope/sync", nil, nil)
	expect(st, b, http.StatusNotFound, "conformance.unknown_instance")

	st, b = e.control(id, "advanceClock", "soon")
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "advanceClock")
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "advanceClock", -5)
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "setAllowedScopes", "a", map[string]string{"project_id": "p1"})
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "prune", map[string]any{"activeWindow": 1})
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "readRows", "ghosts")
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "handleSyncRequest", "a", "not-bytes")
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "restoreBackup")
	expect(st, b, http.StatusConflict, "conformance.failed")
	st, _, b = e.do(http.MethodPost, "/i/"+id+"/control/nowMs", nil, []byte(`{"not":"an array"}`))
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")

	// connectRealtime is the driver's own WebSocket, not a control call.
	st, b = e.control(id, "connectRealtime", "a", "c")
	expect(st, b, http.StatusNotFound, "conformance.unknown_method")
	// Validator rules are checked when installed (§6.7, §6.8).
	st, b = e.control(id, "installValidators", []any{map[string]any{"table": "tasks", "rule": map[string]any{"kind": "regex", "column": "title", "code": "app.x"}}})
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "installValidators", []any{map[string]any{"table": "tasks", "rule": map[string]any{"kind": "maxLength", "column": "title", "max": 3, "code": "sync.mine"}}})
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "installCommitValidator", map[string]any{"kind": "requireSiblingWhen", "table": "ghosts", "column": "done", "equals": true, "siblingRowIdSuffix": "-a", "code": "app.x"})
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	// Leases (§7.3) are per instance: revocation needs them on.
	st, b = e.control(id, "revokeLease", "lease_x")
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "setResolverOutage", "yes")
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, b = e.control(id, "frobnicate")
	expect(st, b, http.StatusNotFound, "conformance.unknown_method")

	// Creation validates its options.
	st, _, b = e.do(http.MethodPost, "/__conformance/instances", nil, []byte(`{"partition":"p","nowMs":1}`))
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, _, b = e.do(http.MethodPost, "/__conformance/instances", nil, []byte(`{"schema":`+notesSchema+`,"partition":"p","nowMs":1,"leases":{"ttlMs":0}}`))
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, _, b = e.do(http.MethodPost, "/__conformance/instances", nil, []byte(`{"schema":`+notesSchema+`,"partition":"p","nowMs":1,"leases":{}}`))
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")
	st, _, b = e.do(http.MethodPost, "/__conformance/instances", nil, []byte(`{"schema":{"version":1,"tables":[{"name":"t"}]},"partition":"p","nowMs":1}`))
	expect(st, b, http.StatusBadRequest, "conformance.bad_args")

	// DELETE drops the instance.
	if st, _, _ := e.do(http.MethodDelete, "/i/"+id, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d", st)
	}
	st, b = e.control(id, "nowMs")
	expect(st, b, http.StatusNotFound, "conformance.unknown_instance")
}

func TestInstancesAreIsolated(t *testing.T) {
	e := newEnv(t)
	a, b := e.create(""), e.create("")
	e.call(a, "setAllowedScopes", nil, "actor", map[string][]string{"project_id": {"*"}})
	e.call(b, "setAllowedScopes", nil, "actor", map[string][]string{"project_id": {"*"}})
	e.client(a, "actor", "c").push("c1", upsert("n1", e.note("n1", "p1", "one", 1, nil)))
	e.call(a, "advanceClock", nil, 10)
	if e.callInt(b, "getMaxCommitSeq") != 0 || e.callInt(b, "nowMs") != startMs || e.callInt(a, "getMaxCommitSeq") != 1 {
		t.Fatal("instances share state")
	}
}

// A schemaWindow (driver ServerCreateOptions) keeps older client schemas
// served: a version-1 client of a version-2 server is answered normally
// instead of with the §1.6 schema floor.
func TestSchemaWindowServesOlderClientSchema(t *testing.T) {
	e := newEnv(t)
	v2 := strings.Replace(notesSchema, `"version": 1`, `"version": 2`, 1)
	for _, tc := range []struct {
		name   string
		window string
		floor  bool
	}{
		{"without window", "", true},
		{"with window", `, "schemaWindow": [` + notesSchema + `]`, false},
	} {
		body := `{"schema": ` + v2 + `, "partition": "part-1", "nowMs": 1750000000000` + tc.window + `}`
		st, _, b := e.do(http.MethodPost, "/__conformance/instances", nil, []byte(body))
		if st != http.StatusOK {
			t.Fatalf("%s: create: %d %s", tc.name, st, b)
		}
		var out struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		c := &client{e: e, id: out.ID, actor: "a", cid: "c-" + out.ID, accept: wire.AcceptInlineRows}
		resp := c.send(nil, &wire.PullHeader{Accept: c.accept}, nil)
		hdr := resp.Frames[0].(*wire.RespHeader)
		if got := hdr.RequiredSchemaVersion.Present; got != tc.floor {
			t.Errorf("%s: schema floor = %v, want %v (%+v)", tc.name, got, tc.floor, hdr)
		}
	}
	// A window entry must be older than the current schema.
	body := `{"schema": ` + notesSchema + `, "partition": "p", "nowMs": 1, "schemaWindow": [` + notesSchema + `]}`
	if st, _, b := e.do(http.MethodPost, "/__conformance/instances", nil, []byte(body)); st == http.StatusOK {
		t.Errorf("a window entry at the current version was accepted: %s", b)
	}
}
