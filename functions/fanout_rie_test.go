package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/dynamostore"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// hintLog records what a tier instance's hint port received.
type hintLog struct {
	mu   sync.Mutex
	got  []string
	seen chan struct{}
}

func (h *hintLog) add(s string) {
	h.mu.Lock()
	h.got = append(h.got, s)
	h.mu.Unlock()
	select {
	case h.seen <- struct{}{}:
	default:
	}
}

func (h *hintLog) Hint(p string, seq int64) { h.add(p + "@" + strconv.FormatInt(seq, 10)) }
func (h *hintLog) HintHead(p string)        { h.add(p + "@head") }

// The fanout function binary under the Lambda emulator: a stream batch
// as Lambda delivers it (a commit's first log item, a later chunk, an
// epoch event) becomes one hint POST to every tier instance in the
// registry; an instance that cannot be reached does not fail the batch;
// a registry that cannot be read does (so the mapping retries it).
func TestFanoutFunctionUnderEmulator(t *testing.T) {
	ddb := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := ddb.Client(t)
	table := testenv.UniqueName(t, "fanout")
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	reg := &rtfanout.Registry{DB: c, Table: table}
	log := &hintLog{seen: make(chan struct{}, 16)}
	inst := httptest.NewServer(&rtfanout.Handler{Hints: log})
	defer inst.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for id, addr := range map[string]string{"live": inst.URL, "dead": dead.URL} {
		if err := reg.Register(ctx, id, addr); err != nil {
			t.Fatal(err)
		}
	}

	bin := testenv.BuildFunction(t, "./"+app.FanoutJob.Dir)
	env := envLocal(t)
	env["SYNC_DYNAMODB_ENDPOINT"] = ddb.Endpoint
	env["SYNC_TABLE_NAME"] = table
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "30"
	rie := testenv.LambdaRIE(t, bin, env)

	rec := func(ev, pk, sk string) map[string]any {
		return map[string]any{"eventName": ev, "eventSource": "aws:dynamodb", "dynamodb": map[string]any{
			"Keys": map[string]any{"pk": map[string]string{"S": pk}, "sk": map[string]string{"S": sk}}, "StreamViewType": "KEYS_ONLY"}}
	}
	lp := dynamostore.PartitionPK("t#1") + "#L"
	batch, _ := json.Marshal(map[string]any{"Records": []any{
		rec("INSERT", lp, "00000000000000000041"),
		rec("INSERT", lp, "00000000000000000042"),
		rec("INSERT", lp, "00000000000000000042#0001"),
		rec("MODIFY", dynamostore.PartitionPK("t2"), dynamostore.EpochSK),
	}})
	out, err := rie.Invoke(ctx, batch)
	if err != nil || strings.Contains(string(out), "errorMessage") {
		t.Fatalf("batch with an unreachable instance failed: %v %s\n%s", err, out, rie.Logs())
	}
	select {
	case <-log.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("no hint reached the instance\n%s", rie.Logs())
	}
	time.Sleep(50 * time.Millisecond) // both hints of the one POST are applied
	log.mu.Lock()
	got := slices.Clone(log.got)
	log.mu.Unlock()
	slices.Sort(got)
	if !slices.Equal(got, []string{"t#1@42", "t2@head"}) {
		t.Fatalf("hints %v, want t#1@42 and t2@head", got)
	}
	if l := rie.WaitLogs(`"failed":1`, 10*time.Second); !strings.Contains(l, `"msg":"realtime fanout"`) || !strings.Contains(l, `"instances":2`) {
		t.Errorf("no fanout line counting 2 instances, 1 failed:\n%s", l)
	}

	// The registry unreadable: the batch fails.
	env["SYNC_TABLE_NAME"] = table + "-missing"
	broken := testenv.LambdaRIE(t, bin, env)
	out, err = broken.Invoke(ctx, batch)
	if err == nil && !strings.Contains(string(out), "errorMessage") {
		t.Fatalf("an unreadable registry did not fail the batch: %s", out)
	}
}
