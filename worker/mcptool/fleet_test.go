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
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is one test's NATS, Redis, registry and dispatcher.
type fleet struct {
	t     *testing.T
	nats  *testserver.NATS
	redis *testserver.Redis
	reg   *registry.Registry
	d     *dispatcher.Dispatcher
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{t: t, nats: testserver.StartNATS(t), redis: testserver.StartRedis(t)}
	var err error
	f.reg, err = registry.New(registry.Config{Client: f.redis.Client(t), TTL: 3 * time.Second, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.d, err = dispatcher.New(t.Context(), dispatcher.Config{Conn: f.nats.Connect(t), Registry: f.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.d.Close() })
	return f
}

// startBridge runs a bridge over the servers until the test ends.
func (f *fleet) startBridge(cfg mcptool.Config) *mcptool.Bridge {
	f.t.Helper()
	js, err := jetstream.New(f.nats.Connect(f.t))
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.Worker.JetStream, cfg.Worker.Registry = js, f.reg
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

// waitTools waits until the dispatcher's catalog lists exactly names.
func (f *fleet) waitTools(what string, names ...string) {
	f.t.Helper()
	waitFor(f.t, 30*time.Second, what, func() bool {
		cat, _ := f.d.Catalog(context.Background())
		if len(cat) != len(names) {
			return false
		}
		for i, e := range cat {
			if e.Spec.Name != names[i] {
				return false
			}
		}
		return true
	})
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
	waitFor(r.t, 10*time.Second, "listen on "+addr, func() bool {
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

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
