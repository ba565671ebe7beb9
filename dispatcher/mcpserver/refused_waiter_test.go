package mcpserver_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// gateTP is a tracer provider whose next span start, once armed, waits
// until released: it holds one Submit inside publish (startSend), after
// its request joined the call id's waiters, for as long as the test
// needs — the time a refused submit's look-up takes, stretched. (A stand-in
// for timing no real server can be made to show on demand.)
type gateTP struct {
	noop.TracerProvider
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateTP) Tracer(string, ...trace.TracerOption) trace.Tracer { return gateTracer{g: g} }

type gateTracer struct {
	noop.Tracer
	g *gateTP
}

func (t gateTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.g.armed.CompareAndSwap(true, false) {
		close(t.g.entered)
		<-t.g.release
	}
	return noop.Tracer{}.Start(ctx, name, opts...)
}

// TestARefusedRequestDoesNotAbsorbACancellation: request A (session 1)
// waits for call X; request B (session 2) with the same _meta call id but
// other arguments is refused id_conflict. A's client cancels while B is
// in its submit. At 9fbfcd5 B counted among X's waiters from before its
// submit, so A left not last and did not cancel X; B, refused, canceled
// nothing, and X — whose only client asked to cancel it — ran on (a gated
// call would have stayed held until its approval window ended). A request
// counts as waiting once its submit is accepted. (Found by a review
// helper.)
func TestARefusedRequestDoesNotAbsorbACancellation(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	started := make(chan string, 8)
	var mu sync.Mutex
	causes := map[string]error{}
	release := make(chan struct{})
	defer close(release)
	work := windlass.MustFunc("work", func(ctx context.Context, in struct {
		N int `json:"n,omitempty"`
	}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		started <- info.ID
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			mu.Lock()
			causes[info.ID] = context.Cause(ctx)
			mu.Unlock()
			return "", ctx.Err()
		}
	}, windlass.WithTimeout(10*time.Minute))
	f.startWorker(worker.Config{}, work)
	gate, d, logs, url := serveGated(t, f)

	const id = "toolu_orphan_1"
	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	doneA := callInBackground(ctxA, connect(t, url, nil), "work", map[string]int{"n": 1}, mcp.Meta{mcpserver.MetaCallID: id})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("call X never started")
	}

	gate.armed.Store(true)
	doneB := callInBackground(t.Context(), connect(t, url, nil), "work", map[string]int{"n": 2}, mcp.Meta{mcpserver.MetaCallID: id})
	select {
	case <-gate.entered: // B joined X's waiters and is in its submit
	case <-time.After(30 * time.Second):
		t.Fatal("B's submit never started")
	}
	cancelA()
	receive(t, doneA)
	fleettest.WaitFor(t, 10*time.Second, "A's handler handled its cancellation", func() bool {
		return logs.has("mcpserver: call canceled", "call_id="+id) || logs.has("another request waits for the call", "call_id="+id)
	})
	close(gate.release)
	oB := receive(t, doneB)
	t.Logf("B: %v %q, %v", oB.res.Meta[mcpserver.MetaErrorCode], text(oB.res), oB.err)
	if oB.res.Meta[mcpserver.MetaErrorCode] != string(windlass.CodeIDConflict) {
		t.Fatalf("B = %v, want id_conflict", oB.res.Meta)
	}
	// Every handler returned; a cancellation either made was stored first.
	st, err := d.Status(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != dispatcher.StateFinished || st.Result.Code() != windlass.CodeCanceled {
		t.Errorf("call X after its client canceled and the only other request was refused: state %s; want canceled — no request waits for it, and it runs on", st.State)
	}
}

// serveGated serves an MCP server over a dispatcher of f whose submits the
// returned gate can hold (gateTP), with its logs recorded.
func serveGated(t *testing.T, f *fleet) (gate *gateTP, d *dispatcher.Dispatcher, logs *logRecorder, url string) {
	gate = &gateTP{entered: make(chan struct{}), release: make(chan struct{})}
	d, logs, url = serveLogged(t, f, dispatcher.Config{TracerProvider: gate})
	return gate, d, logs, url
}

// serveLogged serves an MCP server over a dispatcher of f configured as
// cfg, with its logs recorded (and printed if the test fails).
func serveLogged(t *testing.T, f *fleet, cfg dispatcher.Config) (d *dispatcher.Dispatcher, logs *logRecorder, url string) {
	d = f.Dispatcher(cfg)
	logs = newLogRecorder()
	t.Cleanup(func() { logs.dumpIfFailed(t) })
	return d, logs, serve(t, mcpserver.Config{Dispatcher: d, Logger: slog.New(logs)})
}
