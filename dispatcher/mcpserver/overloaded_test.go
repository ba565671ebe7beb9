package mcpserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// TestCallsStreamFullIsOverloaded: with the calls stream bounded to 3
// calls, full of calls of a tool whose worker is advertised but never
// takes one, a tools/call is an isError result with code overloaded and
// the retry-after in its _meta, at once, not a protocol error.
func TestCallsStreamFullIsOverloaded(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	spec := basicTools()[0].Spec() // add
	lease, err := f.Registry().Advertise(t.Context(), registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: 3}})
	fleettest.WaitCatalog(t, d, "add")
	for range 3 {
		if _, err := d.Submit(t.Context(), "add", map[string]any{"a": 1, "b": 2}); err != nil {
			t.Fatal(err)
		}
	}
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: d}), nil)
	listTools(t, cs)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil {
		t.Fatalf("CallTool: %v; want an isError result", err)
	}
	code, _ := res.Meta[mcpserver.MetaErrorCode].(string)
	after, _ := res.Meta[mcpserver.MetaRetryAfterMS].(float64)
	if !res.IsError || code != string(windlass.CodeOverloaded) || after != float64(limits.SlotRetryAfter.Milliseconds()) {
		t.Fatalf("result = isError %v %q, _meta %v; want isError, code overloaded, retry after %d ms", res.IsError, text(res), res.Meta, limits.SlotRetryAfter.Milliseconds())
	}
}
