package mcptool_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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
// server stays up and the tool succeeds. The SDK reports the lost answer
// as a JSON-RPC error ("rejected by transport"), which once had the caller
// told tool_error for a tool that succeeded (found by a review helper).
//
// What the caller is told depends on whether the tool may run again:
//   - "charge" (no annotations) is not sent again: the remote ran it once,
//     and its caller is told unavailable, that it may have run — retried,
//     as the bridge once did, it charged twice;
//   - "lookup" (idempotentHint) is retried and answers its result.
func TestAConnectionLostMidCall(t *testing.T) {
	t.Parallel()
	for _, jsonResponse := range []bool{true, false} {
		for _, idempotent := range []bool{false, true} {
			tool := map[bool]string{false: "charge", true: "lookup"}[idempotent]
			name := map[bool]string{true: "json", false: "sse"}[jsonResponse] + "/" + tool
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				connectionLostMidCall(t, jsonResponse, tool, idempotent)
			})
		}
	}
}

func connectionLostMidCall(t *testing.T, jsonResponse bool, tool string, idempotent bool) {
	f := newFleet(t)
	var runs, succeeded atomic.Int64
	var mu sync.Mutex
	var metas []mcp.Meta
	started := make(chan struct{}, 8)
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: tool, InputSchema: object(`{}`), Annotations: &mcp.ToolAnnotations{IdempotentHint: idempotent}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			mu.Lock()
			metas = append(metas, req.Params.Meta)
			mu.Unlock()
			started <- struct{}{}
			time.Sleep(300 * time.Millisecond) // it goes through
			succeeded.Add(1)
			return textResult("done"), nil
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
	fleettest.WaitCatalog(t, f.d, tool)

	done := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), tool, nil, dispatcher.WithTimeout(30*time.Second))
		done <- r
	}()
	<-started
	srv.CloseClientConnections() // the network drops; the server goes on
	var r windlass.ToolResult
	select {
	case r = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("no answer")
	}
	// The answer is final (the worker acked the call): a retry would have
	// come before it.
	ranWhenAnswered := runs.Load()
	fleettest.WaitFor(t, 10*time.Second, "the remote handler returned", func() bool { return succeeded.Load() > 0 })
	t.Logf("the caller was told: code %q, attempt %d: %q", r.Code(), r.Attempt, r.Content)
	mu.Lock()
	t.Logf("the remote tool ran %d times when the caller was answered, succeeded %d times; the _meta it got: %v", ranWhenAnswered, succeeded.Load(), metas)
	mu.Unlock()
	if r.Code() == windlass.CodeToolError {
		t.Errorf("the caller was told the tool failed (tool_error, attempt %d): %q; the remote tool succeeded", r.Attempt, r.Content)
	}
	if idempotent {
		if r.IsError {
			t.Errorf("the caller was told %s %q; the idempotent remote tool succeeded and may be retried", r.Code(), r.Content)
		}
		return
	}
	wantToldMayHaveRun(t, r, ranWhenAnswered)
}

// wantToldMayHaveRun checks the answer to a call of a tool that is not
// repeatable, whose answer was lost after the remote took it: it ran once
// (ran, when its caller was answered), not sent again, and its caller was
// told unavailable, that it may have run.
func wantToldMayHaveRun(t *testing.T, r windlass.ToolResult, ran int64) {
	t.Helper()
	if ran != 1 {
		t.Errorf("the remote tool ran %d times: a tool that is not repeatable was sent again after its answer was lost", ran)
	}
	if r.Code() != windlass.CodeUnavailable || !strings.Contains(r.Content, "may have run") {
		t.Errorf("the caller was told %q %q, want unavailable saying the call may have run", r.Code(), r.Content)
	}
}

// TestACallTheServerDidNotTakeIsRetried: the remote answers a call's
// request 404, session not found (a replica behind a load balancer that
// does not know the session, or a server that lost its sessions while the
// bridge's stream to it stayed up). The server certainly did not run it,
// so the call of a tool that is not idempotent is sent again on a new
// session and answers its result.
func TestACallTheServerDidNotTakeIsRetried(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var runs atomic.Int64
	var servers []*mcp.Server
	t.Cleanup(func() {
		for _, server := range servers {
			for s := range server.Sessions() {
				_ = s.Close()
			}
		}
	})
	newServer := func() http.Handler {
		server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
		servers = append(servers, server)
		server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.Add(1)
			return textResult("charged"), nil
		})
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	}
	var current atomic.Pointer[http.Handler]
	first := newServer()
	current.Store(&first)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.CloseClientConnections)
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: srv.URL}}, MaxBackoff: 200 * time.Millisecond})
	fleettest.WaitCatalog(t, f.d, "charge")

	second := newServer() // knows no session: the next request is answered 404
	current.Store(&second)
	r, err := f.d.Call(t.Context(), "charge", nil, dispatcher.WithTimeout(30*time.Second))
	if err != nil || r.IsError || r.Content != "charged" {
		t.Fatalf("Call = %+v, %v; want the tool's result after a retry on a new session", r, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the remote tool ran %d times, want 1", n)
	}
}
