package rttier

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/realtime"
	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/metrics"
	"github.com/skyfold/syncular-lambda/internal/rtfanout"
	"github.com/skyfold/syncular-lambda/internal/wiring"
	"github.com/skyfold/syncular-lambda/internal/wsrealtime"
)

// Intervals of the tier's background work. The registry entry lives
// rtfanout.Lifetime, refreshed every rtfanout.RefreshInterval; the peer
// list (presence targets) is re-read more often, so a new instance gets
// presence within seconds.
const (
	peerRefreshInterval = 5 * time.Second
	metricsInterval     = time.Minute
	// socketQueue bounds one socket's queued messages (the handler's
	// default is 1,024: about 40 KiB allocated per idle socket).
	socketQueue = 128
)

// Tier is one instance of the realtime tier: the hub over the engine,
// the socket endpoint, the hint port and the registry entry.
type Tier struct {
	cfg       *config.Config
	log       *slog.Logger
	hub       *realtime.Hub
	ws        *wsrealtime.Handler
	registry  *rtfanout.Registry
	peers     *peers
	id        string
	advertise string
	draining  atomic.Bool
	emf       *metrics.EMF

	// RealtimeHandler and HintHandler are what the two listeners serve.
	RealtimeHandler, HintHandler http.Handler
}

// New builds an instance over the deployment's table and bucket. cfg's
// secret references are resolved here (wiring.AWSDeps); advertise is the
// hint port's base URL as peers and the fanout function reach it.
func New(ctx context.Context, cfg *config.Config, clients *wiring.AWSClients, logger *slog.Logger, advertise string) (*Tier, error) {
	return NewWith(ctx, cfg, clients, logger, advertise, wiring.Hooks{})
}

// NewWith is New with an app's hooks (validators and reaction planning
// apply to socket pushes as to HTTP ones).
func NewWith(ctx context.Context, cfg *config.Config, clients *wiring.AWSClients, logger *slog.Logger, advertise string, hooks wiring.Hooks) (*Tier, error) {
	sch, err := wiring.LoadSchema(cfg)
	if err != nil {
		return nil, err
	}
	deps, err := wiring.AWSDeps(ctx, cfg, logger, sch, clients)
	if err != nil {
		return nil, err
	}
	t := &Tier{
		cfg: cfg, log: logger, advertise: advertise, id: cfg.InstanceID,
		registry: &rtfanout.Registry{DB: clients.DynamoDB, Table: cfg.TableName},
		emf:      &metrics.EMF{Namespace: cfg.MetricsNamespace, Fixed: map[string]string{metrics.DimFunction: "realtime"}},
	}
	if t.id == "" {
		t.id = randomID()
	}
	// A commit made through one of this instance's sockets hints its own
	// hub at once; other instances learn of it from the stream.
	deps.OnCommit = func(p string, c *store.Commit) { t.hub.Hint(p, c.Seq) }
	deps.Hooks = hooks
	eng, err := wiring.NewEngine(cfg, deps)
	if err != nil {
		return nil, err
	}
	authn, err := wiring.RealtimeAuthenticator(cfg)
	if err != nil {
		return nil, err
	}
	t.peers = &peers{self: t.id, registry: t.registry, log: logger, client: &http.Client{Timeout: rtfanout.DefaultPostTimeout}}
	t.hub = realtime.NewHub(eng, realtime.Options{
		Limits: realtime.Limits{
			MaxRoundRequestBytes: cfg.RealtimeMaxRoundBytes,
			MaxHubRoundBytes:     hubRoundBytes(cfg.RealtimeMaxRoundBytes),
		},
		SegmentBaseURL: cfg.PublicURL,
		Logger:         logger,
		InstanceID:     t.id,
		OnPresence:     t.peers.publish,
	})
	t.peers.gone = t.hub.DropOrigin
	t.ws = &wsrealtime.Handler{
		Hub:    t.hub,
		Auth:   authn,
		Logger: logger,
		// Round messages are bounded by the hub's round caps (the
		// handler reserves them as they arrive); text messages keep the
		// handler's default cap. A full send queue is a dropped delta
		// answered by a wake-up (§8.2), so a short queue is safe; it is
		// allocated per socket.
		// Sockets authenticate by bearer token, never by cookie, so a
		// page of another origin gains nothing from opening one: the
		// origin is not checked (the HTTP API's CORS is for browsers'
		// fetches, which do carry no other credential either).
		Options: wsrealtime.Options{InsecureSkipVerify: true, QueueMessages: socketQueue},
	}
	t.ws.Identify = func(r *http.Request) (engine.Auth, auth.Claims, error) {
		a, claims, err := authn.Authenticate(r.Context(), wsrealtime.Credentials(r))
		if ci := connInfoOf(r.Context()); ci != nil && err == nil {
			ci.partition, ci.actor = a.Partition, a.ActorID
		}
		return a, claims, err
	}
	rt := http.NewServeMux()
	rt.HandleFunc("GET "+cfg.Mount+"/realtime", t.serveRealtime)
	rt.HandleFunc("GET /healthz", t.healthz)
	t.RealtimeHandler = rt
	t.HintHandler = &rtfanout.Handler{Hints: t.hub, Presence: t.remotePresence, Logger: logger}
	return t, nil
}

// hubRoundBytes caps the round bytes all sockets of a task buffer
// together: 256 MiB, or two rounds at the per-socket cap if that is more
// (a 1 GB task then keeps most of its memory for idle sockets; a round
// past the cap closes its socket with 1013, try again later).
func hubRoundBytes(perSocket int) int { return max(256<<20, 2*perSocket) }

// ID is the instance id (registry sort key, presence origin).
func (t *Tier) ID() string { return t.id }

// Hub is the instance's hub.
func (t *Tier) Hub() *realtime.Hub { return t.hub }

func (t *Tier) healthz(w http.ResponseWriter, _ *http.Request) {
	if t.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// remotePresence applies a peer's presence event (POST /internal/presence).
func (t *Tier) remotePresence(_ context.Context, body []byte) error {
	var ev realtime.PresenceEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return fmt.Errorf("presence event: %w", err)
	}
	if ev.Partition == "" || ev.Origin == "" || ev.Session == "" || ev.Fanout.ScopeKey == "" {
		return errors.New("presence event: partition, origin, session and scopeKey are required")
	}
	t.hub.RemotePresence(ev)
	return nil
}

// Run registers the instance and does its background work (registry
// refresh, peer list, connections metric) until ctx ends. The hub's own
// work (hub.Run) is the caller's: it must outlive the drain.
func (t *Tier) Run(ctx context.Context) {
	t.register(ctx)
	_ = t.peers.refresh(ctx)
	reg := time.NewTicker(rtfanout.RefreshInterval)
	peer := time.NewTicker(peerRefreshInterval)
	met := time.NewTicker(metricsInterval)
	defer reg.Stop()
	defer peer.Stop()
	defer met.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reg.C:
			t.register(ctx)
		case <-peer.C:
			if err := t.peers.refresh(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("realtime: peer list not refreshed", "error", err.Error())
			}
		case <-met.C:
			t.writeMetrics(ctx, t.log)
		}
	}
}

func (t *Tier) register(ctx context.Context) {
	if err := t.registry.Register(ctx, t.id, t.advertise); err != nil && ctx.Err() == nil {
		// Without an entry the fanout function skips this instance; its
		// sockets still get every commit from the hub's reconciliation.
		t.log.Error("realtime: registry entry not written", "instance", t.id, "error", err.Error())
	}
}

// writeMetrics writes the connections metric (EMF, function=realtime):
// the tier's autoscaling signal.
func (t *Tier) writeMetrics(ctx context.Context, l *slog.Logger) {
	attrs := []slog.Attr{slog.Int(metrics.Connections.Name, t.ws.Connections()), slog.String("instance", t.id)}
	l.LogAttrs(ctx, slog.LevelInfo, "realtime connections", t.emf.Annotate(attrs)...)
}

// Drain is the SIGTERM path: /healthz answers 503 (the load balancer
// stops routing new sockets here), the drain delay lets in-flight rounds
// finish, then every socket closes with going-away (1001) and its client
// reconnects to another instance and catches up from its cursor; only
// then does the registry entry go. Until it goes the instance still
// reads the log for its sockets, so its entry keeps holding the
// store-format level at what this build reads (dynamostore
// tierlevel.go), and hints keep coming for the rounds in flight.
func (t *Tier) Drain(ctx context.Context, delay time.Duration) {
	t.draining.Store(true)
	t.peers.stop()
	t.log.Info("realtime draining", "instance", t.id, "connections", t.ws.Connections(), "delayMs", delay.Milliseconds())
	time.Sleep(delay)
	t.hub.Drain("server shutting down")
	// Let the close frames go out before the process ends.
	for end := time.Now().Add(5 * time.Second); t.ws.Connections() > 0 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.registry.Deregister(dctx, t.id); err != nil {
		// The entry lapses rtfanout.Lifetime after its last refresh.
		t.log.Warn("realtime: deregister", "instance", t.id, "error", err.Error())
	}
}

// Advertise derives the hint port's URL: SYNC_HINT_ADVERTISE, else the
// task's private IP from the ECS task metadata endpoint v4 and the port
// of SYNC_HINT_ADDR.
func Advertise(ctx context.Context, cfg *config.Config, getenv func(string) string, client *http.Client) (string, error) {
	if cfg.HintAdvertise != "" {
		return strings.TrimRight(cfg.HintAdvertise, "/"), nil
	}
	_, port, err := net.SplitHostPort(cfg.HintAddr)
	if err != nil {
		return "", fmt.Errorf("SYNC_HINT_ADDR %q: %w", cfg.HintAddr, err)
	}
	uri := getenv("ECS_CONTAINER_METADATA_URI_V4")
	if uri == "" {
		return "", errors.New("SYNC_HINT_ADVERTISE is unset and there is no ECS task metadata endpoint (ECS_CONTAINER_METADATA_URI_V4)")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("ECS container metadata: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ECS container metadata: status %d", resp.StatusCode)
	}
	var md struct {
		Networks []struct {
			IPv4Addresses []string `json:"IPv4Addresses"`
		} `json:"Networks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&md); err != nil {
		return "", fmt.Errorf("ECS container metadata: %w", err)
	}
	for _, n := range md.Networks {
		for _, ip := range n.IPv4Addresses {
			if net.ParseIP(ip) != nil {
				return "http://" + net.JoinHostPort(ip, port), nil
			}
		}
	}
	return "", errors.New("ECS container metadata: no IPv4 address")
}

// peers carries this instance's presence events to the other live
// instances (POST /internal/presence) and notices instances that left
// the registry (their presence documents leave: hub.DropOrigin).
type peers struct {
	self     string
	registry *rtfanout.Registry
	client   *http.Client
	log      *slog.Logger
	gone     func(origin string)

	mu      sync.Mutex
	known   map[string]*peer
	stopped bool
	// present is this instance's current presence documents, as join
	// events (partition, session, key → body): a peer that appears later
	// gets them first, so its sockets see documents published before it
	// started (§8.6.3 join burst across instances).
	present map[string][]byte
}

// peer is one other instance with its ordered send queue.
type peer struct {
	addr string
	q    chan []byte
	done chan struct{}
}

// peerQueue bounds one peer's unsent presence events; past it events are
// dropped (logged) rather than blocking the hub.
const peerQueue = 4096

// publish is the hub's OnPresence: it is called with the hub's lock held,
// so it only queues.
func (p *peers) publish(ev realtime.PresenceEvent) {
	body, err := json.Marshal(ev)
	if err != nil {
		p.log.Error("realtime: encode presence event", "error", err.Error())
		return
	}
	key := ev.Partition + "\x00" + ev.Session + "\x00" + ev.Fanout.ScopeKey
	var join []byte
	if ev.Fanout.Kind != realtime.KindLeave && ev.Fanout.Doc != nil {
		j := ev
		j.Fanout.Kind = realtime.KindJoin
		if join, err = json.Marshal(j); err != nil {
			p.log.Error("realtime: encode presence event", "error", err.Error())
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if join == nil {
		delete(p.present, key)
	} else {
		if p.present == nil {
			p.present = map[string][]byte{}
		}
		p.present[key] = join
	}
	for id, pr := range p.known {
		select {
		case pr.q <- body:
		default:
			p.log.Warn("realtime: presence event dropped (peer queue full)", "peer", id)
		}
	}
}

// refresh re-reads the registry: new instances get a sender, vanished
// ones (deregistered or lapsed) are stopped and dropped from the hub.
func (p *peers) refresh(ctx context.Context) error {
	live, err := p.registry.Live(ctx)
	if err != nil {
		return err
	}
	var gone []string
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	if p.known == nil {
		p.known = map[string]*peer{}
	}
	seen := map[string]bool{}
	for _, in := range live {
		if in.ID == p.self {
			continue
		}
		seen[in.ID] = true
		if pr := p.known[in.ID]; pr != nil && pr.addr == in.Addr {
			continue
		} else if pr != nil {
			close(pr.done)
		}
		pr := &peer{addr: in.Addr, q: make(chan []byte, peerQueue), done: make(chan struct{})}
		for _, body := range p.present {
			select {
			case pr.q <- body:
			default:
			}
		}
		p.known[in.ID] = pr
		go p.send(in.ID, pr)
	}
	for id, pr := range p.known {
		if !seen[id] {
			close(pr.done)
			delete(p.known, id)
			gone = append(gone, id)
		}
	}
	p.mu.Unlock()
	for _, id := range gone {
		p.log.Info("realtime: peer left", "peer", id)
		if p.gone != nil {
			p.gone(id)
		}
	}
	return nil
}

func (p *peers) send(id string, pr *peer) {
	for {
		select {
		case <-pr.done:
			return
		case body := <-pr.q:
			if err := rtfanout.Post(context.Background(), p.client, rtfanout.DefaultPostTimeout, pr.addr+rtfanout.PresencePath, body); err != nil {
				p.log.Warn("realtime: presence event not delivered", "peer", id, "error", err.Error())
			}
		}
	}
}

func (p *peers) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for id, pr := range p.known {
		close(pr.done)
		delete(p.known, id)
	}
}

func randomID() string { return "rt-" + strings.ToLower(rand.Text()[:16]) }
