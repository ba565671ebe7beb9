package mcpserver_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is one test's NATS, Redis and registry.
type fleet struct {
	t     *testing.T
	nats  *testserver.NATS
	redis *testserver.Redis
	reg   *registry.Registry
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{t: t, nats: testserver.StartNATS(t), redis: testserver.StartRedis(t)}
	var err error
	f.reg, err = registry.New(registry.Config{Client: f.redis.Client(t), TTL: 3 * time.Second, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// startWorker runs a worker with the tools until the returned stop (also
// a cleanup), and waits until the registry lists it for each tool.
func (f *fleet) startWorker(cfg worker.Config, tools ...windlass.Tool) (stop func()) {
	f.t.Helper()
	js, err := jetstream.New(f.nats.Connect(f.t))
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.JetStream, cfg.Registry = js, f.reg
	cfg.Heartbeat = 50 * time.Millisecond
	w, err := worker.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, tool := range tools {
		if err := w.Register(tool); err != nil {
			f.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			f.t.Errorf("worker: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	f.t.Cleanup(stop)
	waitFor(f.t, 20*time.Second, "worker advertised", func() bool {
		for _, tool := range tools {
			info, err := f.reg.Lookup(context.Background(), tool.Spec().Name)
			if err != nil || !contains(info.LiveWorkers(time.Now()), w.ID()) {
				return false
			}
		}
		return true
	})
	return stop
}

func (f *fleet) dispatcher() *dispatcher.Dispatcher {
	f.t.Helper()
	d, err := dispatcher.New(f.t.Context(), dispatcher.Config{Conn: f.nats.Connect(f.t), Registry: f.reg})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = d.Close() })
	return d
}

// serve mounts an MCP handler over d on a test HTTP server and returns its
// URL. The handler closes (ending sessions) before the server does.
func serve(t *testing.T, cfg mcpserver.Config) string {
	t.Helper()
	h, err := mcpserver.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	return srv.URL
}

// connect opens an SDK client session, closed at cleanup.
func connect(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectTransport(t, opts, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1})
}

// connectTransport opens an SDK client session over tr, closed at cleanup.
func connectTransport(t *testing.T, opts *mcp.ClientOptions, tr *mcp.StreamableClientTransport) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", tr.Endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// toolNames lists the session's tools.
func listTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool
	}
	return out
}

// text is the concatenated text content of a result.
func text(r *mcp.CallToolResult) string {
	var s string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
