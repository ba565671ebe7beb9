package mcptool_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// TestAConnectionLostMidCall: the connection to the remote MCP server
// drops while a call runs there (a network blip, a proxy restart); the
// server stays up and the tool succeeds. The call is retried, as the
// package doc says of a broken connection, and answers the tool's result.
// Before, a server answering with application/json (json) had the caller
// told tool_error, not retried, for a tool that succeeded: the SDK
// reports the lost answer as a JSON-RPC error, "rejected by transport".
// (Found by a review helper.)
func TestAConnectionLostMidCall(t *testing.T) {
	t.Parallel()
	for _, jsonResponse := range []bool{true, false} {
		name := map[bool]string{true: "json", false: "sse"}[jsonResponse]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t)
			var charges, succeeded atomic.Int64
			var mu sync.Mutex
			var metas []mcp.Meta
			chargeStarted := make(chan struct{}, 8)
			server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
			server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				charges.Add(1)
				mu.Lock()
				metas = append(metas, req.Params.Meta)
				mu.Unlock()
				chargeStarted <- struct{}{}
				time.Sleep(300 * time.Millisecond) // the charge goes through
				succeeded.Add(1)
				return textResult("charged"), nil
			})
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			t.Cleanup(func() {
				for s := range server.Sessions() {
					_ = s.Close()
				}
				srv.CloseClientConnections()
			})
			f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: srv.URL}}, MaxBackoff: 200 * time.Millisecond})
			fleettest.WaitCatalog(t, f.d, "charge")

			done := make(chan windlass.ToolResult, 1)
			go func() {
				r, _ := f.d.Call(context.Background(), "charge", nil, dispatcher.WithTimeout(30*time.Second))
				done <- r
			}()
			<-chargeStarted
			srv.CloseClientConnections() // the network drops; the server goes on
			var r windlass.ToolResult
			select {
			case r = <-done:
			case <-time.After(45 * time.Second):
				t.Fatal("no answer")
			}
			fleettest.WaitFor(t, 10*time.Second, "the remote handler returned", func() bool { return succeeded.Load() > 0 })
			t.Logf("the caller was told: code %q, attempt %d: %q", r.Code(), r.Attempt, r.Content)
			mu.Lock()
			t.Logf("the remote tool ran %d times and succeeded %d times; the _meta it got: %v", charges.Load(), succeeded.Load(), metas)
			mu.Unlock()
			if r.Code() == windlass.CodeToolError {
				t.Errorf("the caller was told the tool failed (tool_error, attempt %d, not retried): %q; the remote tool succeeded", r.Attempt, r.Content)
			}
			if r.IsError {
				t.Errorf("the caller was told %s %q; the remote tool succeeded", r.Code(), r.Content)
			}
		})
	}
}
