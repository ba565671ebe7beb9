package mcpserver

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestNotTimedOutWhileTheResultIsUnreadable: the MCP server loses sight
// of NATS (its reads stall: a partition, a server restart) while a call
// runs; the tool succeeds well inside its deadline and its result is
// stored. When the server's bound passes it can neither read the result
// nor cancel the call: the client is told unavailable, with the call's
// id, not that the tool timed out (as Dispatcher.Call says: "whether the
// tool answered could not be read"). Before, it was told timeout. (Found
// by a review helper.)
func TestNotTimedOutWhileTheResultIsUnreadable(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	started := make(chan struct{}, 1)
	proceed := make(chan struct{})
	book := windlass.MustFunc("book", func(ctx context.Context, in struct{}) (string, error) {
		started <- struct{}{}
		<-proceed
		return "booked", nil
	}, windlass.WithTimeout(3*time.Second))
	f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, book)
	gate := &readGate{}
	defer gate.release()
	d := f.Dispatcher(dispatcher.Config{Conn: f.NATS.Connect(t, nats.SetCustomDialer(gate))})
	fleettest.WaitCatalog(t, d, "book")
	h, err := New(t.Context(), Config{Dispatcher: d, QueueAllowance: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "book", Meta: mcp.Meta{MetaCallID: "attack7-book-1"}})
		done <- outcome{res, err}
	}()
	<-started
	// The handler follows the call's events (its watch consumer exists).
	events, err := f.JetStream().Stream(t.Context(), layout.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the handler's watch of the call", func() bool {
		info, err := events.Info(t.Context())
		return err == nil && info.State.Consumers > 0
	})
	gate.hold() // the MCP server's dispatcher reads nothing from NATS from here
	close(proceed)

	var o outcome
	select {
	case o = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("no answer")
	}
	gate.release()
	if o.err != nil {
		t.Fatalf("CallTool: %v", o.err)
	}
	code, _ := o.res.Meta[MetaErrorCode].(string)
	t.Logf("the MCP client was told: isError %v, code %q, %q", o.res.IsError, code, text(o.res))
	var stored windlass.ToolResult
	fleettest.WaitFor(t, 10*time.Second, "the call's stored result", func() bool {
		stored, err = d.Result(context.Background(), "attack7-book-1")
		return err == nil
	})
	t.Logf("the fleet's result of the call: isError %v, %q", stored.IsError, stored.Content)
	if !stored.IsError && code != string(windlass.CodeUnavailable) && text(o.res) != stored.Content {
		t.Errorf("the MCP client was told the tool timed out (%q); the tool succeeded inside its deadline with %q", text(o.res), stored.Content)
	}
}

// text is the text content of r.
func text(r *mcp.CallToolResult) string {
	var s string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}
