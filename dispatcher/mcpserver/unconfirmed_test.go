package mcpserver_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestUnconfirmedCallGivesItsID: a tool call whose call reached the stream
// and ran, but whose publish's acknowledgement never reached the
// dispatcher, answers unavailable with the call's id in _meta: a client
// that retries with that id (_meta["dev.windlass/call_id"]) gets the same
// call, not a second run. Before, the error result carried no id.
func TestUnconfirmedCallGivesItsID(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	ran := make(chan struct{}, 1)
	f.startWorker(worker.Config{}, windlass.MustFunc("once", func(ctx context.Context, _ struct{}) (string, error) {
		ran <- struct{}{}
		return "done", nil
	}))
	dialer := &fleettest.DeafDialer{}
	conn := f.NATS.Connect(t, nats.SetCustomDialer(dialer))
	d := f.Dispatcher(dispatcher.Config{Conn: conn})
	fleettest.WaitCatalog(t, d, "once")
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: d}), nil)
	if listTools(t, cs)["once"] == nil {
		t.Fatal("the tool is not offered")
	}

	dialer.Deafen()
	type answer struct {
		r   *mcp.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "once", Arguments: map[string]any{}})
		got <- answer{r, err}
	}()
	select {
	case <-ran: // stored and run: only the acknowledgement is lost
	case a := <-got:
		t.Fatalf("CallTool = %+v, %v before the tool ran", a.r, a.err)
	}
	conn.Close()
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	id, _ := a.r.Meta[mcpserver.MetaCallID].(string)
	if !a.r.IsError || a.r.Meta[mcpserver.MetaErrorCode] != string(windlass.CodeUnavailable) || id == "" {
		t.Fatalf("CallTool = %s (meta %v); want unavailable with the call's id", text(a.r), a.r.Meta)
	}
	other := f.Dispatcher(dispatcher.Config{})
	if r, err := other.Wait(t.Context(), id); err != nil || r.Content != "done" {
		t.Errorf("Wait(%s) = %+v, %v; want the tool's answer", id, r, err)
	}
}
