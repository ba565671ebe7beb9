package mcptool_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// TestA503FromAProxyAfterTheCallWentIsNotSentAgain: the remote MCP server
// sits behind a proxy that, like Envoy ("503 UC: upstream connect error or
// disconnect/reset before headers. reset reason: connection
// termination"), answers 503 when its upstream connection breaks after it
// forwarded the request. The server took the call and runs it (it
// succeeds); at 84511bf the bridge read the 503 as "not processed" and
// sent charge — no annotations, not repeatable — again. (Found by a
// review helper.)
func TestA503FromAProxyAfterTheCallWentIsNotSentAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var runs, succeeded atomic.Int64
	started := make(chan struct{}, 8)
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		succeeded.Add(1)
		return textResult("charged"), nil
	})
	upstream := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{JSONResponse: true}))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		http.Error(w, "upstream connect error or disconnect/reset before headers. reset reason: connection termination", http.StatusServiceUnavailable)
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	t.Cleanup(func() {
		for s := range server.Sessions() {
			_ = s.Close()
		}
		upstream.CloseClientConnections()
		proxy.CloseClientConnections()
	})
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: proxy.URL}}, MaxBackoff: 200 * time.Millisecond})
	fleettest.WaitCatalog(t, f.d, "charge")

	done := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "charge", nil, dispatcher.WithTimeout(30*time.Second))
		done <- r
	}()
	<-started
	upstream.CloseClientConnections() // proxy -> server connection resets; the server goes on
	var r windlass.ToolResult
	select {
	case r = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("no answer")
	}
	ran := runs.Load()
	fleettest.WaitFor(t, 10*time.Second, "the remote handler returned", func() bool { return succeeded.Load() > 0 })
	t.Logf("the caller was told %q %q; charge ran %d times", r.Code(), r.Content, ran)
	if ran != 1 {
		t.Errorf("charge (not idempotent) ran %d times: the proxy's 503 came after the server took the call", ran)
	}
	if ran == 1 && (r.Code() != windlass.CodeUnavailable || !strings.Contains(r.Content, "may have run")) {
		t.Errorf("told %q %q; want unavailable, may have run", r.Code(), r.Content)
	}
}

// noHooks is an HTTP transport that fires no httptrace hooks, as one not
// built on net/http's Transport does (HTTP/3, an in-process transport, one
// that sends the request on a context of its own): here net/http's, on a
// context that keeps the request's cancellation but none of its values.
type noHooks struct{ base http.RoundTripper }

func (n noHooks) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(context.Background())
	context.AfterFunc(req.Context(), cancel)
	return n.base.RoundTrip(req.Clone(ctx))
}

// TestAnAnsweredRequestIsTakenWhateverTheTransport: with Config.HTTPClient's
// transport firing no httptrace hooks, the call's POST is answered 200
// (SSE), the server runs charge, the stream breaks. At 84511bf the record
// said nothing written (no hook fired) and charge was sent again; an
// answered request was sent, whatever the transport. (Found by a review
// helper.)
func TestAnAnsweredRequestIsTakenWhateverTheTransport(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var runs, succeeded atomic.Int64
	started := make(chan struct{}, 8)
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: "charge", InputSchema: object(`{}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		succeeded.Add(1)
		return textResult("charged"), nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		for s := range server.Sessions() {
			_ = s.Close()
		}
		srv.CloseClientConnections()
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: srv.URL}}, MaxBackoff: 200 * time.Millisecond,
		HTTPClient: &http.Client{Transport: noHooks{tr}}})
	fleettest.WaitCatalog(t, f.d, "charge")

	done := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "charge", nil, dispatcher.WithTimeout(30*time.Second))
		done <- r
	}()
	<-started
	srv.CloseClientConnections()
	var r windlass.ToolResult
	select {
	case r = <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("no answer")
	}
	ran := runs.Load()
	fleettest.WaitFor(t, 10*time.Second, "the remote handler returned", func() bool { return succeeded.Load() > 0 })
	t.Logf("the caller was told %q %q; charge ran %d times", r.Code(), r.Content, ran)
	if ran != 1 {
		t.Errorf("charge (not idempotent) ran %d times: its POST was answered 200, but no hook said it was written", ran)
	}
}
