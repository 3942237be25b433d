package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// tier is one realtime tier instance (cmd/syncular-realtime).
type tier struct {
	ID       string
	Addr     string // host:port of <mount>/realtime and /healthz
	HintAddr string // host:port of the hint endpoint
	proc     *child
	bin      string
	env      []string
	logs     io.Writer
}

// startTier runs instance i on two free loopback ports and waits for its
// health check.
func startTier(ctx context.Context, bin string, i int, env, extra map[string]string, logs io.Writer) (*tier, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	hint, err := freePort()
	for err == nil && hint == port {
		hint, err = freePort()
	}
	if err != nil {
		return nil, err
	}
	t := &tier{ID: "rt-" + strconv.Itoa(i), Addr: "127.0.0.1:" + strconv.Itoa(port), HintAddr: "127.0.0.1:" + strconv.Itoa(hint), bin: bin, logs: logs}
	all := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": os.TempDir(), "TMPDIR": os.TempDir(),
		"AWS_REGION": region, "AWS_DEFAULT_REGION": region,
		"AWS_ACCESS_KEY_ID": "stack", "AWS_SECRET_ACCESS_KEY": "stack", "AWS_EC2_METADATA_DISABLED": "true",
	}
	for k, v := range env {
		all[k] = v
	}
	// What the task's network gives it on ECS (its private IP, the
	// ports of the task definition) is loopback ports here.
	all["SYNC_REALTIME_ADDR"], all["SYNC_HINT_ADDR"], all["SYNC_HINT_ADVERTISE"] = t.Addr, t.HintAddr, "http://"+t.HintAddr
	all["SYNC_INSTANCE_ID"], all["SYNC_REALTIME_DRAIN_DELAY"] = t.ID, "0s"
	for k, v := range extra {
		all[k] = v
	}
	t.env = envList(all)
	return t, t.start(ctx)
}

func (t *tier) start(ctx context.Context) error {
	cmd := exec.Command(t.bin)
	cmd.Env = t.env
	p, err := startChild(t.ID, cmd, t.logs)
	if err != nil {
		return err
	}
	t.proc = p
	deadline := time.Now().Add(60 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if p.exited() {
			return fmt.Errorf("stack: tier %s exited during startup (%v):\n%s", t.ID, p.cmd.ProcessState, p.out.String())
		}
		if r, err := hc.Get("http://" + t.Addr + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop(0)
			return fmt.Errorf("stack: tier %s not healthy after 60s:\n%s", t.ID, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// realtimeProxy is the one <base>/realtime address in front of the tier
// instances (the load balancer's role): each new connection goes to the
// next instance in turn; an instance that refuses the connection (killed)
// is skipped. A request may pin an instance with the X-Stack-Instance
// header (tests use it to put two clients on different instances); the
// answer names the instance that took the connection in the same header.
type realtimeProxy struct {
	tiers []*tier
	next  atomic.Uint64
	rp    *httputil.ReverseProxy
}

const instanceHeader = "X-Stack-Instance"

func newRealtimeProxy(tiers []*tier, log *slog.Logger) *realtimeProxy {
	p := &realtimeProxy{tiers: tiers}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = "instances" // chosen per attempt by the transport
			r.SetXForwarded()
		},
		Transport: p,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("realtime proxy: no instance answered", "error", err.Error())
			gatewayError(w, http.StatusBadGateway, "Bad Gateway")
		},
	}
	return p
}

func (p *realtimeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.rp.ServeHTTP(w, r) }

var proxyTransport = &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext, MaxIdleConnsPerHost: 16}

// RoundTrip tries the instances from the next in turn, moving on only
// when one refuses the connection (nothing was sent, so a retry is safe).
func (p *realtimeProxy) RoundTrip(r *http.Request) (*http.Response, error) {
	order := make([]*tier, 0, len(p.tiers))
	if pin := r.Header.Get(instanceHeader); pin != "" {
		for _, t := range p.tiers {
			if t.ID == pin {
				order = append(order, t)
			}
		}
	}
	start := int(p.next.Add(1))
	for i := range p.tiers {
		order = append(order, p.tiers[(start+i)%len(p.tiers)])
	}
	var lastErr error
	for _, t := range order {
		out := r.Clone(r.Context())
		out.URL.Host, out.Host = t.Addr, t.Addr
		out.Header.Del(instanceHeader)
		resp, err := proxyTransport.RoundTrip(out)
		if err == nil {
			resp.Header.Set(instanceHeader, t.ID)
			return resp, nil
		}
		lastErr = err
		if !refused(err) {
			return nil, err
		}
	}
	return nil, lastErr
}

func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// Instances lists the tier instances' ids.
func (s *Stack) Instances() []string {
	ids := make([]string, len(s.tiers))
	for i, t := range s.tiers {
		ids[i] = t.ID
	}
	return ids
}

// KillInstance SIGKILLs a tier instance, as a crash would end it.
func (s *Stack) KillInstance(id string) error {
	for _, t := range s.tiers {
		if t.ID == id {
			t.proc.kill()
			return nil
		}
	}
	return fmt.Errorf("stack: no instance %s", id)
}

// RestartInstance starts a stopped instance again on its ports.
func (s *Stack) RestartInstance(ctx context.Context, id string) error {
	for _, t := range s.tiers {
		if t.ID == id {
			if !t.proc.exited() {
				return fmt.Errorf("stack: instance %s is running", id)
			}
			return t.start(ctx)
		}
	}
	return fmt.Errorf("stack: no instance %s", id)
}

// InstanceURL is an instance's own ws:// realtime URL, bypassing the
// proxy (for loads that would double the proxy's sockets).
func (s *Stack) InstanceURL(id string) string {
	for _, t := range s.tiers {
		if t.ID == id {
			return "ws://" + t.Addr + "/realtime"
		}
	}
	return ""
}
