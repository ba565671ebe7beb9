package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// A call the handler cannot follow (its watch fails) is answered
// unavailable, naming the call id so that the client can ask again, and
// goes on in the fleet. Before, every end of the wait was taken for the
// MCP server's bound passing: the client was told the tool timed out a
// moment after it called, and the running call was canceled. The fault is
// a real server's: the events stream's consumer limit (every waiting call
// holds one consumer of it), so the second call cannot start its watch.
// (Found by a review helper.)
func TestAWatchErrorIsUnavailableAndTheCallGoesOn(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	f.startWorker(worker.Config{}, b.tool("block"))
	d, _, url := serveLogged(t, f, dispatcher.Config{})
	cs := connect(t, url, nil)

	js := f.JetStream()
	s, err := js.Stream(t.Context(), layout.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxConsumers = 1
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}

	doneA := callInBackground(t.Context(), cs, "block", nil, mcp.Meta{mcpserver.MetaCallID: "watch_a"})
	b.waitStarted(t, 1)
	doneB := callInBackground(t.Context(), cs, "block", nil, mcp.Meta{mcpserver.MetaCallID: "watch_b"})
	o := receive(t, doneB)
	if o.err != nil {
		t.Fatalf("call B: %v", o.err)
	}
	code := o.res.Meta[mcpserver.MetaErrorCode]
	if !o.res.IsError || code != string(windlass.CodeUnavailable) || o.res.Meta[mcpserver.MetaCallID] != "watch_b" || !strings.Contains(text(o.res), "watch_b") {
		t.Errorf("call B whose watch failed = isError %v, code %v, _meta %v, %q; want unavailable, naming the call id", o.res.IsError, code, o.res.Meta, text(o.res))
	}
	close(b.release)
	if o := receive(t, doneA); o.err != nil || o.res.IsError {
		t.Errorf("call A = %+v, %v", o.res, o.err)
	}
	if st := waitFinished(t, d, "watch_b"); st.Result.IsError {
		t.Errorf("call B after its watch failed: %s %q (tool's context: %v); want it to go on and succeed", st.Result.Code(), st.Result.Content, b.cause("watch_b"))
	}
}
