package mcpserver_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is one test's fleet (see fleettest).
type fleet struct {
	*fleettest.Fleet
	t *testing.T
}

// newFleet starts a fleet whose leases last 3s.
func newFleet(t *testing.T) *fleet {
	t.Helper()
	return &fleet{Fleet: fleettest.New(t, fleettest.WithRegistryTTL(3*time.Second)), t: t}
}

// startWorker runs a worker with the tools, heartbeats every 50ms, until
// the returned stop (also a cleanup), and waits until the registry lists
// it for each tool.
func (f *fleet) startWorker(cfg worker.Config, tools ...windlass.Tool) (stop func()) {
	f.t.Helper()
	cfg.Heartbeat = 50 * time.Millisecond
	w := f.StartWorker(cfg, tools...)
	// A Run error is reported by the fleet's cleanup.
	return func() { _ = w.Stop() }
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
