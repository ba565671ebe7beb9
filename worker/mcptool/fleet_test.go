package mcptool_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is one test's fleet (see fleettest) and a dispatcher on it.
type fleet struct {
	*fleettest.Fleet
	t *testing.T
	d *dispatcher.Dispatcher
}

// newFleet starts a fleet whose leases last 3s, and a dispatcher.
func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{Fleet: fleettest.New(t, fleettest.WithRegistryTTL(3*time.Second)), t: t}
	f.d = f.Dispatcher(dispatcher.Config{})
	return f
}

// startBridge runs a bridge over the servers until the test ends.
func (f *fleet) startBridge(cfg mcptool.Config) *mcptool.Bridge {
	f.t.Helper()
	cfg.Worker.JetStream, cfg.Worker.Registry = f.JetStream(), f.NewRegistry()
	cfg.Worker.ShutdownGrace = 5 * time.Second
	// A call the server hands to a retiring generation's last pull request
	// is redelivered after the ack wait (see the package doc): keep it short.
	cfg.Worker.AckWait = 2 * time.Second
	cfg.MaxBackoff = cmpDuration(cfg.MaxBackoff, 500*time.Millisecond)
	b, err := mcptool.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.Run(ctx); err != nil {
			f.t.Errorf("bridge: %v", err)
		}
	})
	f.t.Cleanup(func() { cancel(); wg.Wait() })
	return b
}

func cmpDuration(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// remoteServer is an MCP server built with the SDK, on a restartable
// test HTTP server.
type remoteServer struct {
	t      *testing.T
	server *mcp.Server
	addr   string
	http   *httptest.Server
	mu     sync.Mutex
}

func newRemote(t *testing.T, server *mcp.Server) *remoteServer {
	t.Helper()
	r := &remoteServer{t: t, server: server}
	r.start("127.0.0.1:0")
	t.Cleanup(r.stop)
	return r
}

func (r *remoteServer) URL() string { return "http://" + r.addr + "/mcp" }

func (r *remoteServer) start(addr string) {
	r.t.Helper()
	var l net.Listener
	var err error
	fleettest.WaitFor(r.t, 10*time.Second, "listen on "+addr, func() bool {
		l, err = net.Listen("tcp", addr)
		return err == nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.server }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	r.mu.Lock()
	r.http, r.addr = srv, l.Addr().String()
	r.mu.Unlock()
}

// stop closes the HTTP server and every session.
func (r *remoteServer) stop() {
	r.mu.Lock()
	srv := r.http
	r.http = nil
	r.mu.Unlock()
	if srv == nil {
		return
	}
	for s := range r.server.Sessions() {
		_ = s.Close()
	}
	srv.CloseClientConnections()
	srv.Close()
}

// textResult is a result whose content is text.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func object(props string) json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":` + props + `}`)
}
