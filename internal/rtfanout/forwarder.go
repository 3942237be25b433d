package rtfanout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	ds "github.com/skyfold/syncular-lambda/internal/dynamostore"
)

// Stream event names (DynamoDB Streams' eventName).
const (
	Insert = "INSERT"
	Modify = "MODIFY"
	Remove = "REMOVE"
)

// Record is the part of a table stream record fanout reads: the event
// and the keys (the stream view is KEYS_ONLY).
type Record struct {
	Event  string
	PK, SK string
}

// HintsOf turns stream records into hints: a commit's first log item
// INSERT (dynamostore.ParseCommitKey) is a commit hint, an epoch-event
// item INSERT or MODIFY (dynamostore.ParseEpochKey, written by
// RotateEpoch) a head hint. Commit hints of one partition collapse to the
// highest seq (the hub reads the log up to it). The result is in
// partition order, head hints first; nil when nothing is hinted.
func HintsOf(recs []Record) []Hint {
	seqs := map[string]int64{}
	heads := map[string]bool{}
	for _, r := range recs {
		switch r.Event {
		case Insert:
			if p, seq, ok := ds.ParseCommitKey(r.PK, r.SK); ok {
				if seq > seqs[p] {
					seqs[p] = seq
				}
				continue
			}
			fallthrough
		case Modify:
			if p, ok := ds.ParseEpochKey(r.PK, r.SK); ok {
				heads[p] = true
			}
		}
	}
	out := make([]Hint, 0, len(seqs)+len(heads))
	for p := range heads {
		out = append(out, Hint{Partition: p, Head: true})
	}
	for p, s := range seqs {
		out = append(out, Hint{Partition: p, Seq: s})
	}
	if len(out) == 0 {
		return nil
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Head && !out[j].Head
	})
	return out
}

// Lister returns the live instances (a *Registry).
type Lister interface {
	Live(ctx context.Context) ([]Instance, error)
}

// DefaultPostTimeout bounds one POST to one instance.
const DefaultPostTimeout = 2 * time.Second

// Forwarder is the fanout function's work: hint every live tier instance
// of a stream batch's commits and epoch events.
type Forwarder struct {
	Registry Lister
	// Client posts the hints; http.DefaultClient when nil.
	Client *http.Client
	// Timeout bounds each POST (DefaultPostTimeout when zero).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Result counts one Forward.
type Result struct {
	Hints, Instances, Failed int
}

// Forward posts the hints of recs to every live instance in parallel. An
// instance that cannot be reached (or answers other than 2xx) is logged
// and counted, never an error: the hub's reconciliation and the next hint
// cover it, and failing the batch would only replay it to every other
// instance. The batch fails (so the event source mapping retries it) only
// when the registry cannot be read, since then no instance was hinted.
func (f *Forwarder) Forward(ctx context.Context, recs []Record) (Result, error) {
	hints := HintsOf(recs)
	res := Result{Hints: len(hints)}
	if len(hints) == 0 {
		return res, nil
	}
	insts, err := f.Registry.Live(ctx)
	if err != nil {
		return res, err
	}
	res.Instances = len(insts)
	body, err := json.Marshal(Hints{Hints: hints})
	if err != nil {
		return res, fmt.Errorf("rtfanout: encode hints: %w", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(insts))
	for i, inst := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.post(ctx, inst.Addr+HintsPath, body)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			res.Failed++
			f.log().Warn("realtime: hint not delivered", "instance", insts[i].ID, "addr", insts[i].Addr, "error", err.Error())
		}
	}
	return res, nil
}

func (f *Forwarder) post(ctx context.Context, url string, body []byte) error {
	return Post(ctx, f.Client, f.Timeout, url, body)
}

// Post sends one JSON body to url within timeout (DefaultPostTimeout when
// zero) and expects a 2xx answer.
func Post(ctx context.Context, c *http.Client, timeout time.Duration, url string, body []byte) error {
	if c == nil {
		c = http.DefaultClient
	}
	if timeout <= 0 {
		timeout = DefaultPostTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: status %d", url, resp.StatusCode)
	}
	return nil
}

func (f *Forwarder) log() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}
