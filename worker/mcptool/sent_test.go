package mcptool_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// TestACallInFlightWhenASiblingGets404IsNotSentAgain: two calls share the
// bridge's session. "charge" (no annotations) is running on replica 1 when
// the load balancer starts sending the session's requests to replica 2,
// which does not know it: the next request ("ping") is answered 404. The
// SDK fails the whole connection with ErrSessionMissing, and every call in
// flight on it — charge included, which replica 1 took and is running — is
// retired with that error. Taken for "the server did not take it" (as at
// 84511bf), charge was sent again and ran twice; its own request was
// answered 200, so its caller is told it may have run. (Found by a review
// helper.)
func TestACallInFlightWhenASiblingGets404IsNotSentAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var charges atomic.Int64
	started := make(chan struct{}, 8)
	release := make(chan struct{})
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
		server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			charges.Add(1)
			started <- struct{}{}
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			return textResult("charged"), nil
		})
		server.AddTool(&mcp.Tool{Name: "ping", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult("pong"), nil
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
	fleettest.WaitCatalog(t, f.d, "charge", "ping")

	done := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "charge", nil, dispatcher.WithTimeout(30*time.Second))
		done <- r
	}()
	<-started // replica 1 runs charge
	second := newServer()
	current.Store(&second) // replica 2 knows no session
	if r, err := f.d.Call(t.Context(), "ping", nil, dispatcher.WithTimeout(20*time.Second)); err != nil || r.IsError {
		t.Logf("ping: %+v, %v", r, err)
	}
	// The answer is final (the worker acked the call): a retry would have
	// come before it.
	r := <-done
	ran := charges.Load()
	close(release)
	t.Logf("charge's caller was told %q %q; charge ran %d times", r.Code(), r.Content, ran)
	wantToldMayHaveRun(t, r, ran) // not sent again for another request's 404
}

// TestACallNeverSentIsNotToldItMayHaveRun: the remote server has no
// standalone SSE stream (GET answered 405, as many servers do), so the
// bridge does not see it go down. It is down when a call comes: the POST's
// dial is refused, the request never reached it. The SDK reports it as it
// reports a lost answer ("rejected by transport"); at 84511bf the caller
// was told the call may have run. It is retried until its deadline, and
// its caller told it timed out. (Found by a review helper.)
func TestACallNeverSentIsNotToldItMayHaveRun(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var runs atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return textResult("charged"), nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		for s := range server.Sessions() {
			_ = s.Close()
		}
	})
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: srv.URL}}, MaxBackoff: 200 * time.Millisecond})
	fleettest.WaitCatalog(t, f.d, "charge")
	srv.Close() // the server goes down (a restart)

	r, err := f.d.Call(t.Context(), "charge", nil, dispatcher.WithTimeout(5*time.Second))
	t.Logf("the caller was told %q %q (%v); the tool ran %d times", r.Code(), r.Content, err, runs.Load())
	if runs.Load() != 0 || r.Code() != windlass.CodeTimeout {
		t.Errorf("the request never reached the server (dial refused): told %q %q, ran %d times; want timeout, not run", r.Code(), r.Content, runs.Load())
	}
}

// TestACallRateLimitedByAProxyIsSentAgain: a proxy in front of the remote
// server answers the call's POST 429 (rate limited): the server never saw
// it. The SDK reports it "rejected by transport" (-32005); at 84511bf the
// caller was told the call may have run. It is sent again, runs once and
// answers. (Found by a review helper.)
func TestACallRateLimitedByAProxyIsSentAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var runs, limited atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return textResult("charged"), nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) && limited.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		for s := range server.Sessions() {
			_ = s.Close()
		}
		srv.CloseClientConnections()
	})
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: srv.URL}}, MaxBackoff: 200 * time.Millisecond})
	fleettest.WaitCatalog(t, f.d, "charge")

	r, err := f.d.Call(t.Context(), "charge", nil, dispatcher.WithTimeout(20*time.Second))
	t.Logf("the caller was told %q %q (%v); the tool ran %d times", r.Code(), r.Content, err, runs.Load())
	if r.IsError || r.Content != "charged" || runs.Load() != 1 {
		t.Errorf("after a 429 from a proxy: told %q %q, ran %d times; want the result, run once", r.Code(), r.Content, runs.Load())
	}
}
