package mcptool_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// TestARetryToAWindlassServerAfterALostConnection: the bridge's remote MCP
// server is another windlass fleet's MCP server (fleet B). The connection
// drops while B runs a call of an idempotent tool; the bridge retries it,
// as the package doc says, and the caller gets the tool's result. The bridge closes the
// broken session (DELETE) before the retry, and B cancels the calls of a
// session that ended: sent with the same call id in _meta (as at afc0272),
// the retry was that canceled call, and the caller was told the tool
// failed, canceled by nobody. (Found by a review helper.)
func TestARetryToAWindlassServerAfterALostConnection(t *testing.T) {
	t.Parallel()
	// Fleet B: a worker running "slow", its dispatcher, its MCP server.
	b := fleettest.New(t, fleettest.WithRegistryTTL(3*time.Second))
	var started, finished atomic.Int64
	slow := windlass.MustFunc("slow", func(ctx context.Context, _ struct{}) (string, error) {
		started.Add(1)
		select {
		case <-time.After(time.Second):
			finished.Add(1)
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, windlass.WithTimeout(10*time.Second), windlass.WithHints(windlass.ToolHints{Idempotent: new(true)}))
	b.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, slow)
	bd := b.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, bd, "slow")
	h, err := mcpserver.New(t.Context(), mcpserver.Config{Dispatcher: bd})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })

	// Fleet A bridges B's MCP server.
	f := newFleet(t)
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: srv.URL}}, MaxBackoff: 200 * time.Millisecond})
	fleettest.WaitCatalog(t, f.d, "slow")

	done := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "slow", nil, dispatcher.WithTimeout(30*time.Second))
		done <- r
	}()
	fleettest.WaitFor(t, 10*time.Second, "B's tool started", func() bool { return started.Load() == 1 })
	srv.CloseClientConnections() // the network drops; both fleets go on
	var r windlass.ToolResult
	select {
	case r = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("no answer")
	}
	t.Logf("the caller was told: code %q, attempt %d: %q; B's tool started %d times, finished %d", r.Code(), r.Attempt, r.Content, started.Load(), finished.Load())
	if r.IsError {
		t.Errorf("the caller was told %q (%q) after a dropped connection that the bridge retries; B's tool started %d times and finished %d: want its result", r.Code(), r.Content, started.Load(), finished.Load())
	}
}
