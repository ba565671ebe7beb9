package mcpserver

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// The SDK ends a tools/call request's context itself, not on the client's
// notifications/cancelled, with a cause: ErrServerClosing once a session's
// close begins or a response cannot be written (which happens to every
// other request of a session when Handler.Close closes it while answers
// are still to be written), the read error when the connection's reading
// ends. None is the client's cancellation: the call goes on in the fleet,
// and the request is answered unavailable with the call id. Before, any
// end of the request canceled the call, "canceled by the MCP client".
// The request's end is forced here through a middleware, with the SDK's
// causes' texts.
func TestARequestTheSDKEndsLeavesItsCallRunning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cause error
	}{
		{name: "session closing", cause: errors.New("jsonrpc2: server is closing: session is closed")},
		{name: "reading ended", cause: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := fleettest.New(t)
			started := make(chan struct{}, 1)
			release := make(chan struct{})
			block := windlass.MustFunc("block", func(ctx context.Context, in struct{}) (string, error) {
				started <- struct{}{}
				select {
				case <-release:
					return "done", nil
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
			}, windlass.WithTimeout(10*time.Minute))
			f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, block)
			d := f.Dispatcher(dispatcher.Config{})
			fleettest.WaitCatalog(t, d, "block")
			h, err := New(t.Context(), Config{Dispatcher: d})
			if err != nil {
				t.Fatal(err)
			}
			endRequest := make(chan context.CancelCauseFunc, 1)
			h.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if method == "tools/call" {
						var end context.CancelCauseFunc
						ctx, end = context.WithCancelCause(ctx)
						defer end(nil)
						endRequest <- end
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

			const id = "toolu_ended_1"
			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "block", Meta: mcp.Meta{MetaCallID: id}})
				done <- outcome{res, err}
			}()
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("the tool never started")
			}
			(<-endRequest)(tt.cause)
			var o outcome
			select {
			case o = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("no answer")
			}
			if o.err != nil {
				t.Fatalf("CallTool: %v", o.err)
			}
			if code := o.res.Meta[MetaErrorCode]; code != string(windlass.CodeUnavailable) || o.res.Meta[MetaCallID] != id || !strings.Contains(text(o.res), "the call goes on") {
				t.Errorf("the request the SDK ended = code %v, _meta %v, %q; want unavailable, the call going on, its id", code, o.res.Meta, text(o.res))
			}
			// The handler had returned: a cancellation it made was answered.
			if st, err := d.Status(t.Context(), id); err != nil || st.State == dispatcher.StateFinished {
				t.Fatalf("call after its request ended: %+v, %v; want it still running", st, err)
			}
			close(release)
			var st dispatcher.CallStatus
			fleettest.WaitFor(t, 30*time.Second, "the call finished", func() bool {
				st, err = d.Status(t.Context(), id)
				return err == nil && st.State == dispatcher.StateFinished
			})
			if st.Result.IsError {
				t.Errorf("call after its request ended: %s %q; want it to go on and succeed", st.Result.Code(), st.Result.Content)
			}
		})
	}
}
