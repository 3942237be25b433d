package stack

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/skyfold/syncular-lambda/internal/app/apptest"
	"github.com/skyfold/syncular-lambda/internal/core/engine/enginetest"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// loadSock is a lean realtime client for the hot-scope measurement: it
// syncs once over the socket, then only timestamps the first delta and
// the first presence join it receives.
type loadSock struct {
	ws              *websocket.Conn
	round           chan []byte
	delta, presence atomic.Int64 // unix ns of arrival; 0 = none yet
	wakes           atomic.Int64
	closed          atomic.Bool
	hello           chan struct{} // closed at the hello
	gone            chan struct{} // closed when the read loop ends
	err             error         // why, once gone is closed
}

// TestFanoutLoad (SSP2_FANOUT_LOAD=1, `make fanout-load`): one commit
// reaching SSP2_FANOUT_SOCKETS (default 10,000) sockets subscribed to one
// scope key, spread over the tier instances, and one presence join fanned
// out to all of them. Reports p50/p95/max from the push (an HTTP push
// through the gateway: stream → fanout function → hints) to each socket's
// delta, and from the publish to each socket's presence event. Sockets go
// to the instances directly (the proxy would double the descriptors).
func TestFanoutLoad(t *testing.T) {
	if os.Getenv("SSP2_FANOUT_LOAD") != "1" {
		t.Skip("SSP2_FANOUT_LOAD=1 runs the hot-scope measurement (make fanout-load)")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("SSP2_FANOUT_SOCKETS")); err == nil && v > 0 {
		n = v
	}
	s := withTier(t)
	d := deployment(s)
	ids := s.Instances()
	const project = "hot"
	scopes := map[string][]string{"project_id": {project}}

	// The partition's log epoch, once for everyone.
	wtok := d.Token(t, "hot-writer", scopes)
	epoch := d.Epoch(t, "push", "/sync", wtok, "hot-writer")
	sub := &wire.Subscription{ID: "tasks", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}, Cursor: -1}

	socks := make([]*loadSock, n)
	var failed atomic.Int64
	var firstErr atomic.Value
	connectStart := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 48)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ls, err := connectLoad(s, d, t, s.InstanceURL(ids[i%len(ids)]), i, epoch, sub)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			socks[i] = ls
		}()
	}
	wg.Wait()
	t.Logf("%d sockets connected and synced over %d instances in %v (%d failed; first error: %v)", n-int(failed.Load()), len(ids), time.Since(connectStart).Round(time.Millisecond), failed.Load(), firstErr.Load())
	defer func() {
		for _, ls := range socks {
			if ls != nil {
				ls.ws.CloseNow()
			}
		}
	}()
	if failed.Load() > 0 {
		t.Fatalf("%d sockets failed to connect", failed.Load())
	}
	time.Sleep(2 * time.Second) // the acks are processed

	// One commit, pushed over HTTP.
	start := time.Now()
	d.Push(t, wtok, "hot-writer", epoch, wire.PushCommit{ClientCommitID: "hot-1", Operations: []wire.Operation{
		apptest.Upsert("tasks", "hot-1", 0, d.Task(t, "hot-1", project, "hot")),
	}})
	pushed := time.Since(start)
	report(t, "commit → delta", socks, start, func(ls *loadSock) int64 { return ls.delta.Load() })
	t.Logf("(the HTTP push itself took %v)", pushed.Round(time.Millisecond))

	// One presence join, published from a socket on the first instance.
	pub := socks[0]
	start = time.Now()
	msg := `{"event":"presence","data":{"scopeKey":"project:` + project + `","doc":{"at":"load"}}}`
	if err := pub.ws.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	report(t, "presence join", socks[1:], start, func(ls *loadSock) int64 { return ls.presence.Load() })
}

func connectLoad(s *Stack, d *apptest.Deployment, t *testing.T, base string, i int, epoch string, sub *wire.Subscription) (*loadSock, error) {
	clientID := "hot-" + strconv.Itoa(i)
	tok, err := s.Token("hot-"+strconv.Itoa(i), map[string][]string{"project_id": {"hot"}}, time.Hour)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, base+"?clientId="+url.QueryEscape(clientID)+"&token="+url.QueryEscape(tok), nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(16 << 20)
	ls := &loadSock{ws: ws, round: make(chan []byte, 64), hello: make(chan struct{}), gone: make(chan struct{})}
	go ls.read()
	// The round waits for the hello: bytes sent before the tier has taken
	// the connection over can be lost there (its byte-counting Hijack
	// hands coder/websocket a reader that drops what net/http buffered).
	select {
	case <-ls.hello:
	case <-ls.gone:
		return nil, fmt.Errorf("%s: closed before its hello: %v", clientID, ls.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: no hello", clientID)
	}
	hdr := wire.ReqHeader{ClientID: clientID, SchemaVersion: s.Schema.Latest, LogEpoch: wire.Some(epoch)}
	body := apptest.Request(t, wire.Version3, hdr, pullHeader, sub)
	if err := ws.Write(ctx, websocket.MessageBinary, append([]byte{realtime.TagRound}, body...)); err != nil {
		return nil, fmt.Errorf("round: %w", err)
	}
	var stream []byte
	for {
		select {
		case b := <-ls.round:
			stream = append(stream, b...)
		case <-ls.gone:
			return nil, fmt.Errorf("%s: closed during its round: %v", clientID, ls.err)
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: round: no answer after %d bytes", clientID, len(stream))
		}
		m, err := wire.Decode(stream)
		if err != nil {
			continue
		}
		secs, err := enginetest.ParseSections(m)
		if err != nil || len(secs) != 1 {
			return nil, fmt.Errorf("round: %v", err)
		}
		if err := ws.Write(ctx, websocket.MessageText, realtime.EncodeAck(secs[0].End.NextCursor)); err != nil {
			return nil, err
		}
		return ls, nil
	}
}

func (ls *loadSock) read() {
	for {
		typ, b, err := ls.ws.Read(context.Background())
		if err != nil {
			ls.err = err
			ls.closed.Store(true)
			close(ls.gone)
			return
		}
		now := time.Now().UnixNano()
		if typ == websocket.MessageBinary && len(b) > 0 {
			switch b[0] {
			case realtime.TagRound:
				ls.round <- b[1:]
			case realtime.TagDelta:
				ls.delta.CompareAndSwap(0, now)
			}
			continue
		}
		switch m, _ := realtime.Parse(b); m := m.(type) {
		case *realtime.Hello:
			close(ls.hello)
		case *realtime.PresenceFanout:
			if m.Kind == realtime.KindJoin {
				ls.presence.CompareAndSwap(0, now)
			}
		case *realtime.Wake:
			ls.wakes.Add(1)
		}
	}
}

// report waits up to 60 s for every socket's timestamp and logs the
// latency distribution from start.
func report(t *testing.T, what string, socks []*loadSock, start time.Time, at func(*loadSock) int64) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		done := 0
		for _, ls := range socks {
			if at(ls) != 0 {
				done++
			}
		}
		if done == len(socks) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var lat []time.Duration
	missing, wakes, closed := 0, int64(0), 0
	for _, ls := range socks {
		wakes += ls.wakes.Load()
		if ls.closed.Load() {
			closed++
		}
		if ns := at(ls); ns != 0 {
			lat = append(lat, time.Duration(ns-start.UnixNano()))
		} else {
			missing++
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("%s to %d sockets: p50 %v, p95 %v, max %v; %d missing, %d wake-ups, %d closed",
		what, len(socks), q(0.50), q(0.95), q(1), missing, wakes, closed)
	if missing > 0 {
		t.Errorf("%s: %d of %d sockets got nothing", what, missing, len(socks))
	}
}
