package integration_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/layout"
)

// holdingProxy forwards TCP between a client and a server; while held, what
// the client sends is kept back (the server sees nothing, so answers
// nothing: a stalled network, a server too busy to read), and sent on when
// the hold ends.
type holdingProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	held    bool
	pending [][]byte
	kept    int // chunks kept back during the current hold
	release int // the hold ends once this many chunks were kept
	conns   []net.Conn
	server  net.Conn // the last connection's, for free
	wg      sync.WaitGroup
}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *holdingProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *holdingProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.server = s
		p.mu.Unlock()
		p.wg.Go(func() { p.toServer(c, s) })
		p.wg.Go(func() { pipe(s, c) })
	}
}

func pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// toServer forwards the client's bytes, keeping them back while held.
func (p *holdingProxy) toServer(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			p.mu.Lock()
			if p.held {
				p.pending = append(p.pending, chunk)
				p.kept += strings.Count(string(chunk), "PUB $JS.API.")
				if p.kept >= p.release {
					p.held = false
					chunk = nil
					for _, b := range p.pending {
						chunk = append(chunk, b...)
					}
					p.pending = nil
				} else {
					chunk = nil
				}
			}
			p.mu.Unlock()
			if chunk != nil {
				if _, werr := s.Write(chunk); werr != nil {
					return
				}
			}
		}
		if err != nil {
			_ = s.Close()
			return
		}
	}
}

// hold keeps back what the client sends until it sent n more JetStream
// API requests: the server answers none of them before the n-th is sent.
func (p *holdingProxy) hold(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held, p.kept, p.release = true, 0, n
}

// free ends a hold, sending on what it kept.
func (p *holdingProxy) free() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.pending {
		_, _ = p.server.Write(b)
	}
	p.pending, p.held = nil, false
}

// TestAStaleDenialDoesNotMakeASlowRequestPermanent: a dispatcher given a
// bound for the calls stream (max_queued_calls), run as a dispatcher user
// of deploy/nats/accounts.conf, has BoundCalls refused (the documented,
// tolerated case: dispatcher.New warns and goes on). The refusal stays the
// connection's LastError. dispatcher.New then opens the payloads bucket
// (EnsurePayloads), a request its user may make; the server does not
// answer the first one in time (a stalled network here; a busy server, a
// leader election) — the case EnsurePayloads asks again for, for half a
// minute. The second request would be answered at once. deniedAPI sees the
// stale violation of $JS.API.STREAM.UPDATE.WINDLASS_CALLS, a request the
// user never made this time, and ends it at once with ErrNotPermitted: the
// dispatcher does not start, told its user may not do what it may.
func TestAStaleDenialDoesNotMakeASlowRequestPermanent(t *testing.T) {
	ps := startPermServer(t)
	adminJS, _ := jetstream.New(ps.connect(t, "admin", nil))
	if _, err := layout.EnsurePayloads(t.Context(), adminJS, layout.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("after a refused BoundCalls", func(t *testing.T) { slowRequests(t, ps, true) })
	t.Run("control: no refusal before", func(t *testing.T) { slowRequests(t, ps, false) })
}

func slowRequests(t *testing.T, ps *permServer, refusedFirst bool) {
	p := newHoldingProxy(t, ps.nats.URL())
	nc, err := nats.Connect(p.url(), nats.UserInfo("dispatcher-a", ps.passwords["dispatcher-a"]),
		nats.CustomInboxPrefix(deploy.InboxPrefix("dispatcher-a")), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))

	// As dispatcher.New does with Limits.MaxQueuedCalls under the shipped
	// permissions: refused, warned, not fatal.
	if !refusedFirst {
	} else if _, err := layout.BoundCalls(t.Context(), js, layout.StreamOptions{MaxQueuedCalls: 50}); !errors.Is(err, layout.ErrNotPermitted) {
		t.Fatalf("BoundCalls = %v; want ErrNotPermitted (the documented refusal)", err)
	}
	t.Logf("LastError after BoundCalls: %v", nc.LastError())

	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"EnsurePayloads", func() error { _, err := layout.EnsurePayloads(t.Context(), js, layout.StreamOptions{}); return err }},
		{"EnsureStreams", func() error { return layout.EnsureStreams(t.Context(), js, layout.CallsConfig(layout.StreamOptions{})) }},
	} {
		p.hold(2) // the first request goes unanswered; the network is back when the second is sent
		start := time.Now()
		err := step.do()
		t.Logf("%s after %s: %v", step.name, time.Since(start).Round(100*time.Millisecond), err)
		p.free()
		if err != nil {
			t.Errorf("%s = %v; want success: a request its user may make was not answered once in time (nothing was refused), and the next would have been", step.name, err)
		}
	}
}
