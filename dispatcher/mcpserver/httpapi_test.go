package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
)

// bearerTransport adds an API key to every request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// The MCP server mounted in the dispatcher's HTTP service (the handler of
// windlass dispatcher), behind its API keys: an SDK client lists and calls
// a tool and a gated tool after approval.
func TestThroughDispatcherHTTPService(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	pay := windlass.MustFunc("pay", func(ctx context.Context, in payArgs) (string, error) {
		return fmt.Sprintf("paid %.2f to %s", in.Amount, in.To), nil
	}, windlass.WithApproval())
	f.startWorker(wcfg, append(basicTools(), pay)...)
	d := f.Dispatcher(dispatcher.Config{})
	mh, err := mcpserver.New(t.Context(), mcpserver.Config{Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	key := httpapi.NewAPIKey()
	api, err := httpapi.New(httpapi.Config{Dispatcher: d, APIKeys: []httpapi.APIKey{{Name: "agent", SHA256: httpapi.HashAPIKey(key)}},
		Extra: map[string]http.Handler{"/mcp": mh}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = mh.Close() })

	// Without the key: refused.
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", MaxRetries: -1}, nil); err == nil {
		_ = cs.Close()
		t.Fatal("connected without an API key")
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	tools := listTools(t, cs)
	if len(tools) != 4 || tools["pay"] == nil || tools["add"] == nil {
		t.Fatalf("tools = %v", tools)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}, Meta: mcp.Meta{mcpserver.MetaCallID: "mcp-keyed"}})
	if err != nil || res.IsError || text(res) != "5" {
		t.Fatalf("add = %+v, %v", res, err)
	}
	// The call is counted for the API key the client presented.
	if st, err := d.Status(ctx, "mcp-keyed"); err != nil || st.Key != "agent" {
		t.Errorf("status of the MCP call = %+v, %v; want key agent, the API key's name", st, err)
	}
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pay", Arguments: payArgs{To: "carol", Amount: 7}})
		if err != nil {
			t.Errorf("pay: %v", err)
		}
		done <- res
	}()
	apr.approveOne("pay")
	if res := <-done; res == nil || res.IsError || text(res) != "paid 7.00 to carol" {
		t.Fatalf("pay = %+v", res)
	}
}
