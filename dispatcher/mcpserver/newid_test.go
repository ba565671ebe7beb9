package mcpserver_test

import (
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestAFreshMCPCallIsNotTakenForAResubmit: a tools/call without _meta
// call id gets an id the MCP server generates. Passed to Submit as a
// caller's own id (WithCallID), a call the fleet refuses as it is now
// (here invalid_arguments) had its id looked up as a possible resubmit,
// and with the streams unreadable (NATS down) the client was told
// unavailable, "Call id X may name a call the fleet accepted before", for
// an id that names nothing (found by a review helper). It goes as a new
// call's id (WithNewCallID): refused as a call without an id would be.
func TestAFreshMCPCallIsNotTakenForAResubmit(t *testing.T) {
	f := newFleet(t)
	f.startWorker(worker.Config{}, basicTools()...)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "add", "fail", "weather")
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: d}), nil)
	bad := map[string]any{"a": "one", "b": 2}

	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: bad})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS up: %s %v", text(r), r.Meta)
	if r.Meta[mcpserver.MetaErrorCode] != string(windlass.CodeInvalidArguments) {
		t.Fatalf("control: CallTool = %s; want invalid_arguments", text(r))
	}

	f.NATS.Stop()
	_, err = d.Submit(t.Context(), "add", bad)
	var ce *windlass.CallError
	if !errors.As(err, &ce) || ce.Code != windlass.CodeInvalidArguments {
		t.Fatalf("control: Submit without an id while NATS is down = %v; want invalid_arguments", err)
	}
	start := time.Now()
	r, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: bad})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS down, after %s: %s %v", time.Since(start).Round(time.Millisecond), text(r), r.Meta)
	if r.Meta[mcpserver.MetaErrorCode] != string(windlass.CodeInvalidArguments) {
		t.Errorf("CallTool without a _meta id = %s (code %v, call id %v); want invalid_arguments: the id was generated for this request and names no accepted call",
			text(r), r.Meta[mcpserver.MetaErrorCode], r.Meta[mcpserver.MetaCallID])
	}
}
