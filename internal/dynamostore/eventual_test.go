package dynamostore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// laggingClient forwards to DynamoDB Local and plays a lagging replica:
// the items whose sort key starts with one of hide are dropped from the
// answers to eventually consistent Queries and BatchGetItems (DynamoDB
// Local itself always answers them consistently). It counts those calls
// by consistency.
type laggingClient struct {
	base dynamodb.HTTPClient

	mu                   sync.Mutex
	hide                 []string
	consistent, eventual int
}

func (c *laggingClient) Do(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	batch := strings.HasSuffix(target, ".BatchGetItem")
	if !batch && !strings.HasSuffix(target, ".Query") {
		return c.base.Do(r)
	}
	in, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(in))
	var req struct {
		ConsistentRead *bool
		RequestItems   map[string]struct{ ConsistentRead *bool }
	}
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, err
	}
	consistent := req.ConsistentRead
	for _, ka := range req.RequestItems {
		consistent = ka.ConsistentRead
	}
	c.mu.Lock()
	eventual := consistent == nil || !*consistent
	if eventual {
		c.eventual++
	} else {
		c.consistent++
	}
	hide := slices.Clone(c.hide)
	c.mu.Unlock()
	resp, err := c.base.Do(r)
	if err != nil || !eventual || len(hide) == 0 || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, err
	}
	keep := func(items []any) []any {
		kept := items[:0]
		for _, it := range items {
			sk, _ := it.(map[string]any)["sk"].(map[string]any)["S"].(string)
			if !slices.ContainsFunc(hide, func(h string) bool { return strings.HasPrefix(sk, h) }) {
				kept = append(kept, it)
			}
		}
		return kept
	}
	if batch {
		resp, _ := out["Responses"].(map[string]any)
		for table, items := range resp {
			resp[table] = keep(items.([]any))
		}
	} else {
		kept := keep(out["Items"].([]any))
		out["Items"], out["Count"] = kept, len(kept)
	}
	if body, err = json.Marshal(out); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	return resp, nil
}

// lag hides the log items whose sort key starts with one of prefixes
// from now on, and resets the counts.
func (c *laggingClient) lag(prefixes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hide = prefixes
	c.consistent, c.eventual = 0, 0
}

func (c *laggingClient) counts() (consistent, eventual int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consistent, c.eventual
}

// TestReadLogEventuallyConsistent (issue 23): ReadLog reads the window
// eventually consistently (half the read units) and falls back to a
// consistent read exactly when the answer shows a miss: with every
// commit replicated it makes no consistent Query; with a commit in the
// middle, the last commit, or a chunk of a chunked commit not yet
// replicated, it still passes every commit of the window once, in order.
func TestReadLogEventuallyConsistent(t *testing.T) {
	base := ddbClient(t)
	table := newTable(t, base)
	lc := &laggingClient{base: base.Options().HTTPClient}
	c := dynamodb.New(base.Options(), func(o *dynamodb.Options) { o.HTTPClient = lc })
	s := dynamostore.New(c, table, dynamostore.Options{})
	ctx := context.Background()
	p := "lag"
	if _, err := s.TouchPartition(ctx, p, baseMs, "epoch"); err != nil {
		t.Fatal(err)
	}
	const n = 6
	for seq := int64(1); seq <= n; seq++ {
		rows := []store.RowWrite{up(fmt.Sprint("r", seq), 1, []byte("small"))}
		if seq == 4 { // a log of three chunk items
			rows = []store.RowWrite{up("big1", 1, randBytes(300<<10)), up("big2", 1, randBytes(300<<10)), up("big3", 1, randBytes(300<<10))}
		}
		if err := s.Commit(ctx, p, commitOf(seq-1, fmt.Sprint("c", seq), rows...)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(after int64) []int64 {
		t.Helper()
		var got []int64
		if err := s.ReadLog(ctx, p, after, n, func(c *store.Commit) bool {
			got = append(got, c.Seq)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	all := []int64{1, 2, 3, 4, 5, 6}

	lc.lag()
	if got := read(0); !slices.Equal(got, all) {
		t.Fatalf("ReadLog: %v, want %v", got, all)
	}
	if cons, ev := lc.counts(); cons != 0 || ev == 0 {
		t.Errorf("replicated window: %d consistent and %d eventually consistent Queries, want 0 and some", cons, ev)
	}

	for _, tc := range []struct {
		name string
		lag  []string
	}{
		{"a commit in the middle", []string{fmt.Sprintf("%020d", 2)}},
		{"the last commit", []string{fmt.Sprintf("%020d", 6)}},
		{"a chunk", []string{fmt.Sprintf("%020d#0001", 4)}},
		{"the first commit", []string{fmt.Sprintf("%020d", 1)}},
	} {
		lc.lag(tc.lag...)
		if got := read(0); !slices.Equal(got, all) {
			t.Errorf("%s not replicated: ReadLog passed %v, want %v", tc.name, got, all)
		}
		if cons, _ := lc.counts(); cons == 0 {
			t.Errorf("%s not replicated: no consistent read", tc.name)
		}
	}

	// A window above a pruned commit reads as before.
	lc.lag()
	if _, err := s.Prune(ctx, p, 2); err != nil {
		t.Fatal(err)
	}
	if got := read(2); !slices.Equal(got, all[2:]) {
		t.Fatalf("ReadLog above the horizon: %v, want %v", got, all[2:])
	}
	if got := read(0); !slices.Equal(got, all[2:]) {
		t.Fatalf("ReadLog across the horizon: %v, want %v", got, all[2:])
	}
}

// TestReadLogScopedEventuallyConsistent (issue 23): with the log index
// on, ReadLogScoped reads the listed commits after its first batch (the
// head's) eventually consistently, and a commit missing from that answer
// is read again consistently, not taken for pruned.
func TestReadLogScopedEventuallyConsistent(t *testing.T) {
	base := ddbClient(t)
	table := newTable(t, base)
	lc := &laggingClient{base: base.Options().HTTPClient}
	c := dynamodb.New(base.Options(), func(o *dynamodb.Options) { o.HTTPClient = lc })
	s := dynamostore.New(c, table, dynamostore.Options{IndexNewPartitions: true})
	ctx := context.Background()
	p := "lagidx"
	if _, err := s.TouchPartition(ctx, p, baseMs, "epoch"); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var all []int64
	for seq := int64(1); seq <= n; seq++ {
		if err := s.Commit(ctx, p, commitOf(seq-1, fmt.Sprint("c", seq), up(fmt.Sprint("r", seq), 1, []byte("x")))); err != nil {
			t.Fatal(err)
		}
		all = append(all, seq)
	}
	read := func() ([]int64, int64) {
		t.Helper()
		var got []int64
		hz, err := s.ReadLogScoped(ctx, p, "tasks", "org", []string{"o1"}, 0, n, func(c *store.Commit) bool {
			got = append(got, c.Seq)
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, hz
	}
	lc.lag()
	if got, hz := read(); !slices.Equal(got, all) || hz != 0 {
		t.Fatalf("ReadLogScoped: %v (horizon %d), want %v", got, hz, all)
	}
	if _, ev := lc.counts(); ev == 0 {
		t.Error("no eventually consistent read of the listed commits")
	}
	lc.lag(fmt.Sprintf("%020d", 30))
	if got, hz := read(); !slices.Equal(got, all) || hz != 0 {
		t.Fatalf("commit 30 not replicated: ReadLogScoped %v (horizon %d), want %v", got, hz, all)
	}
}
