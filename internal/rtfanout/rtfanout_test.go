package rtfanout

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sink records the hints an instance's hub would receive.
type sink struct {
	mu    sync.Mutex
	seqs  []string
	heads []string
}

func (s *sink) Hint(p string, seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seqs = append(s.seqs, p+"@"+itoa(seq))
}

func (s *sink) HintHead(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heads = append(s.heads, p)
}

func (s *sink) got() ([]string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seqs), slices.Clone(s.heads)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// table creates a fresh table (with the template's KEYS_ONLY stream when
// stream is set) on DynamoDB Local.
func table(t *testing.T, stream bool) (*dynamodb.Client, string, string) {
	t.Helper()
	ddb := testenv.DynamoDB(t)
	c := ddb.Client(t)
	name := testenv.UniqueName(t, "rtf")
	ctx := context.Background()
	if err := ds.CreateTable(ctx, c, name); err != nil {
		t.Fatal(err)
	}
	if !stream {
		return c, name, ""
	}
	out, err := c.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(name), StreamSpecification: &types.StreamSpecification{
		StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, name, aws.ToString(out.TableDescription.LatestStreamArn)
}

// The registry lists registered instances until they deregister or their
// entry lapses (exp), whatever DynamoDB's TTL sweep has not yet removed.
func TestRegistryLiveEntries(t *testing.T) {
	c, name, _ := table(t, false)
	now := time.Unix(1_800_000_000, 0)
	r := &Registry{DB: c, Table: name, Now: func() time.Time { return now }}
	ctx := context.Background()
	for _, id := range []string{"b", "a", "c"} {
		if err := r.Register(ctx, id, "http://10.0.0."+id+":8081"); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		t.Helper()
		live, err := r.Live(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, in := range live {
			out = append(out, in.ID+"="+in.Addr)
		}
		return out
	}
	if got := ids(); !slices.Equal(got, []string{"a=http://10.0.0.a:8081", "b=http://10.0.0.b:8081", "c=http://10.0.0.c:8081"}) {
		t.Fatalf("live %v", got)
	}
	if err := r.Deregister(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// a refreshes 40 s later; c does not, and lapses after Lifetime.
	now = now.Add(40 * time.Second)
	if err := r.Register(ctx, "a", "http://10.0.0.a:8081"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(Lifetime - 30*time.Second)
	if got := ids(); !slices.Equal(got, []string{"a=http://10.0.0.a:8081"}) {
		t.Fatalf("after deregister and lapse: %v", got)
	}
	// The entry also carries the table's TTL attribute.
	it, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: ds.Key(RegistryPK, "a")})
	if err != nil || it.Item[ds.TTLAttribute] == nil {
		t.Fatalf("entry without %s: %v %v", ds.TTLAttribute, it, err)
	}
}

func TestHintsOf(t *testing.T) {
	lp := func(p string) string { return ds.PartitionPK(p) + "#L" }
	recs := []Record{
		{Insert, lp("p1"), "00000000000000000007"},
		{Insert, lp("p1"), "00000000000000000005"},
		{Insert, lp("p1"), "00000000000000000008#0001"}, // a later chunk: not a commit's first item
		{Modify, lp("p2"), "00000000000000000003"},      // log items are never modified; not a commit
		{Insert, lp("p#2"), "00000000000000000002"},
		{Modify, ds.PartitionPK("p3"), ds.EpochSK},
		{Insert, ds.PartitionPK("p1"), ds.EpochSK},
		{Remove, ds.PartitionPK("p4"), ds.EpochSK},
		{Insert, ds.PartitionPK("p5"), "HEAD"},
		{Insert, RegistryPK, "i-1"},
	}
	got, _ := json.Marshal(HintsOf(recs))
	want := `[{"partition":"p#2","seq":2},{"partition":"p1","head":true},{"partition":"p1","seq":7},{"partition":"p3","head":true}]`
	if string(got) != want {
		t.Fatalf("hints\n got %s\nwant %s", got, want)
	}
	if HintsOf(recs[7:]) != nil {
		t.Fatal("records without commits or epoch events give no hints")
	}
}

// The forwarder hints every live instance; one that cannot be reached
// (its entry still live: it died a moment ago) neither fails the batch nor
// keeps the others from their hints. A registry that cannot be read fails
// the batch, so the event source mapping retries it.
func TestForwarderHintsEveryLiveInstance(t *testing.T) {
	c, name, _ := table(t, false)
	reg := &Registry{DB: c, Table: name}
	ctx := context.Background()
	sinks := []*sink{{}, {}}
	for i, s := range sinks {
		srv := httptest.NewServer(&Handler{Hints: s})
		defer srv.Close()
		if err := reg.Register(ctx, "inst-"+itoa(int64(i)), srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // its address now refuses connections
	if err := reg.Register(ctx, "inst-dead", dead.URL); err != nil {
		t.Fatal(err)
	}
	// And one that accepts the connection but never answers.
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer func() { close(hang); slow.Close() }()
	if err := reg.Register(ctx, "inst-slow", slow.URL); err != nil {
		t.Fatal(err)
	}

	f := &Forwarder{Registry: reg, Timeout: 300 * time.Millisecond}
	res, err := f.Forward(ctx, []Record{
		{Insert, ds.PartitionPK("p1") + "#L", "00000000000000000004"},
		{Modify, ds.PartitionPK("p2"), ds.EpochSK},
	})
	if err != nil {
		t.Fatalf("an unreachable instance failed the batch: %v", err)
	}
	if res.Hints != 2 || res.Instances != 4 || res.Failed != 2 {
		t.Fatalf("result %+v, want 2 hints to 4 instances, 2 failed", res)
	}
	for i, s := range sinks {
		seqs, heads := s.got()
		if !slices.Equal(seqs, []string{"p1@4"}) || !slices.Equal(heads, []string{"p2"}) {
			t.Errorf("instance %d got %v %v", i, seqs, heads)
		}
	}

	bad := &Forwarder{Registry: &Registry{DB: c, Table: name + "-missing"}}
	if _, err := bad.Forward(ctx, []Record{{Insert, ds.PartitionPK("p1") + "#L", "00000000000000000005"}}); err == nil {
		t.Fatal("an unreadable registry must fail the batch")
	}
	if res, err := bad.Forward(ctx, []Record{{Insert, ds.PartitionPK("p1"), "HEAD"}}); err != nil || res.Instances != 0 {
		t.Fatalf("a batch without hints reads no registry: %+v %v", res, err)
	}
}

func TestHandlerRefusesBadRequests(t *testing.T) {
	s := &sink{}
	srv := httptest.NewServer(&Handler{Hints: s, Presence: func(context.Context, []byte) error { return nil }})
	defer srv.Close()
	post := func(path, body string) int {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := post(HintsPath, `{"hints":[{"partition":"p","seq":3}]}`); st != http.StatusNoContent {
		t.Fatalf("good hints: %d", st)
	}
	if st := post(HintsPath, `not json`); st != http.StatusBadRequest {
		t.Errorf("bad JSON: %d", st)
	}
	if st := post(HintsPath, `{"hints":[`+strings.Repeat(`{"partition":"p","seq":1},`, MaxHintsBodyBytes/25)+`]}`); st != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized hints: %d", st)
	}
	if st := post(PresencePath, `"`+strings.Repeat("x", MaxPresenceBodyBytes)+`"`); st != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized presence: %d", st)
	}
	if st := post("/internal/other", `{}`); st != http.StatusNotFound {
		t.Errorf("unknown path: %d", st)
	}
	resp, err := http.Get(srv.URL + HintsPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	if seqs, _ := s.got(); !slices.Equal(seqs, []string{"p@3"}) {
		t.Errorf("hints applied: %v", seqs)
	}
}

// RotateEpoch writes the epoch-event item in the rotation's own
// transaction, so the stream (read here as the event source mapping reads
// it) carries every rotation, and the forwarder turns it into a head hint.
func TestRotateEpochReachesTheStream(t *testing.T) {
	c, name, arn := table(t, true)
	ctx := context.Background()
	st := ds.New(c, name, ds.Options{})
	if _, err := st.TouchPartition(ctx, "tenant#1", 1, "e1"); err != nil {
		t.Fatal(err)
	}
	var events []string
	var hints []Hint
	p := &Poller{Streams: streamsClient(t, c), StreamARN: arn, Handle: func(_ context.Context, recs []Record) error {
		for _, r := range recs {
			if r.SK == ds.EpochSK {
				events = append(events, r.Event)
			}
		}
		hints = append(hints, HintsOf(recs)...)
		return nil
	}}
	for _, ep := range []string{"e2", "e3"} {
		if err := st.RotateEpoch(ctx, "tenant#1", ep, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.RotateEpoch(ctx, "nobody", "e9", 3); err != ds.ErrUnknownPartition {
		t.Fatalf("rotating an unknown partition: %v", err)
	}
	if _, err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(events, []string{Insert, Modify}) {
		t.Fatalf("epoch events on the stream %v, want one per rotation (INSERT, MODIFY)", events)
	}
	got, _ := json.Marshal(hints)
	if want := `[{"partition":"tenant#1","head":true}]`; string(got) != want {
		t.Fatalf("stream hints %s, want %s (a batch's rotations of one partition are one head hint)", got, want)
	}
	it, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: ds.Key(ds.PartitionPK("nobody"), ds.EpochSK)})
	if err != nil || it.Item != nil {
		t.Fatalf("a refused rotation left an epoch event: %v %v", it.Item, err)
	}
}

func streamsClient(t *testing.T, c *dynamodb.Client) *dynamodbstreams.Client {
	t.Helper()
	o := c.Options()
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region: o.Region, Credentials: o.Credentials, BaseEndpoint: o.BaseEndpoint, HTTPClient: o.HTTPClient,
	})
}
