package mcpserver

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// A client cancels its tools/call while the handler still waits for the
// fleet to acknowledge the call's publish, though the call is stored and
// its tool already runs: on a loaded machine the acknowledgement can come
// after the worker started the tool and the client's cancellation arrived.
// The call is canceled in the fleet all the same, and its tool stops.
func TestCancelWhileSubmitAwaitsItsAck(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	block := windlass.MustFunc("block", func(ctx context.Context, in struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", ctx.Err()
	})
	f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, block)
	gate := &readGate{}
	d := f.Dispatcher(dispatcher.Config{Conn: f.NATS.Connect(t, nats.SetCustomDialer(gate))})
	fleettest.WaitCatalog(t, d, "block")
	h, err := New(t.Context(), Config{Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	// canceled is closed when the tools/call handler's context ends: the
	// client's notifications/cancelled arrived.
	canceled := make(chan struct{})
	var once sync.Once
	h.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				context.AfterFunc(ctx, func() { once.Do(func() { close(canceled) }) })
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	// From here the dispatcher reads nothing NATS sends it until released:
	// the call's publish is stored, and the worker runs it, but its
	// acknowledgement waits.
	gate.hold()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "block"})
		errs <- err
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		gate.release()
		t.Fatal("the tool never started")
	}
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool after cancel = %v, want context.Canceled", err)
	}
	select {
	case <-canceled:
	case <-time.After(30 * time.Second):
		t.Error("the tools/call handler's context did not end within 30s of the client's cancellation")
	}
	gate.release() // the acknowledgement arrives after the cancellation
	select {
	case cause := <-causes:
		if !errors.Is(cause, windlass.ErrCallCanceled) {
			t.Errorf("the tool's context ended with %v, want windlass.ErrCallCanceled (canceled in the fleet)", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the running tool was not canceled within 20s: the handler gave up on its submit and left the call running")
	}
}

// readGate is a nats.CustomDialer whose connections can be held: while
// held, what a connection reads from the server is handed to the client
// only at release, so nothing the server sends (an acknowledgement, a
// message) reaches it meanwhile.
type readGate struct {
	mu     sync.Mutex
	closed chan struct{} // nil while open
}

func (g *readGate) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, gate: g}, nil
}

func (g *readGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *readGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

func (g *readGate) wait() {
	g.mu.Lock()
	ch := g.closed
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

type gatedConn struct {
	net.Conn
	gate *readGate
}

// Read hands over what it read once the gate is open: a read under way
// when the gate closed is held too.
func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.gate.wait()
	return n, err
}
