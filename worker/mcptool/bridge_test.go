package mcptool_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// remoteTools is an MCP server with tools whose names need sanitising and
// disambiguating, and results of every kind.
func remoteTools() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	echoArgs := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(string(req.Params.Arguments)), nil
	}
	s.AddTool(&mcp.Tool{Name: "echo.args", Description: "Echo the arguments.", InputSchema: object(`{"x":{"type":"integer"}}`)}, echoArgs)
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Another echo.", InputSchema: object(`{}`)}, echoArgs)
	s.AddTool(&mcp.Tool{Name: "a.b", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("dot"), nil
	})
	s.AddTool(&mcp.Tool{Name: "a_b", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("underscore"), nil
	})
	s.AddTool(&mcp.Tool{Name: "weather", Title: "Weather", InputSchema: object(`{"city":{"type":"string"}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(true)}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ City string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			res := textResult(`{"city":"` + in.City + `","temp":21.5}`)
			res.StructuredContent = map[string]any{"city": in.City, "temp": 21.5}
			return res, nil
		})
	s.AddTool(&mcp.Tool{Name: "broken", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "upstream said no"}}, IsError: true}, nil
	})
	return s
}

func TestRemoteToolsInTheFleet(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	remote := newRemote(t, remoteTools())
	b := f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: remote.URL()}}, Reserved: []string{"echo"}})
	fleettest.WaitCatalog(t, f.d, "a_b", "a_b_2", "broken", "echo_2", "echo_args", "weather") // the remote tools in the catalog

	want := []mcptool.Mapping{
		{Tool: "a_b", Remote: "a.b", URL: remote.URL()},
		{Tool: "a_b_2", Remote: "a_b", URL: remote.URL()},
		{Tool: "broken", Remote: "broken", URL: remote.URL()},
		{Tool: "echo_2", Remote: "echo", URL: remote.URL()},
		{Tool: "echo_args", Remote: "echo.args", URL: remote.URL()},
		{Tool: "weather", Remote: "weather", URL: remote.URL()},
	}
	if got := b.Mapping(); !slices.Equal(got, want) {
		t.Errorf("mapping = %v\nwant      %v", got, want)
	}
	cat, _ := f.d.Catalog(t.Context())
	for _, e := range cat {
		if e.Spec.Name == "weather" {
			h := e.Spec.Hints
			if e.Spec.Description != "Weather" || h == nil || h.ReadOnly == nil || !*h.ReadOnly || h.OpenWorld == nil || !*h.OpenWorld {
				t.Errorf("weather's spec = %+v (hints %+v): want the title as description and the annotations as hints", e.Spec, h)
			}
		}
	}

	tests := []struct {
		name      string
		tool      string
		args      string
		want      string
		wantData  string
		wantError windlass.ErrorCode
	}{
		{name: "arguments pass through", tool: "echo_args", args: `{"x":7}`, want: `{"x":7}`},
		{name: "renamed", tool: "echo_2", args: `{}`, want: `{}`},
		{name: "collision, first", tool: "a_b", args: `{}`, want: "dot"},
		{name: "collision, second", tool: "a_b_2", args: `{}`, want: "underscore"},
		{name: "structured content is the data", tool: "weather", args: `{"city":"Oslo"}`, want: `{"city":"Oslo","temp":21.5}`, wantData: `{"city":"Oslo","temp":21.5}`},
		{name: "isError is a tool error", tool: "broken", args: `{}`, want: "upstream said no", wantError: windlass.CodeToolError},
		{name: "remote schema checked", tool: "echo_args", args: `{"x":"seven"}`, want: "$.x", wantError: windlass.CodeInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := f.d.Call(t.Context(), tt.tool, json.RawMessage(tt.args), dispatcher.WithTimeout(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if r.Code() != tt.wantError || !strings.Contains(r.Content, tt.want) {
				t.Errorf("result = %q (code %q), want %q (code %q)", r.Content, r.Code(), tt.want, tt.wantError)
			}
			if tt.wantData != "" && string(r.Data) != tt.wantData {
				t.Errorf("data = %s, want %s", r.Data, tt.wantData)
			}
		})
	}
}

func TestRemoteListChanged(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: "first", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("one"), nil
	})
	remote := newRemote(t, server)
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: remote.URL(), Prefix: "r_"}}})
	fleettest.WaitCatalog(t, f.d, "r_first") // the first tool

	server.AddTool(&mcp.Tool{Name: "second", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("two"), nil
	})
	fleettest.WaitCatalog(t, f.d, "r_first", "r_second") // a tool the server added
	r, _ := f.d.Call(t.Context(), "r_second", nil, dispatcher.WithTimeout(30*time.Second))
	if r.Content != "two" {
		t.Errorf("r_second = %+v", r)
	}
	server.RemoveTools("first")
	fleettest.WaitCatalog(t, f.d, "r_second") // only the tool left
	r, _ = f.d.Call(t.Context(), "r_second", nil, dispatcher.WithTimeout(30*time.Second))
	if r.Content != "two" {
		t.Errorf("r_second after the other was removed = %+v", r)
	}
}

func TestReconnectAfterRemoteRestart(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	server := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	server.AddTool(&mcp.Tool{Name: "ping", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("pong"), nil
	})
	remote := newRemote(t, server)
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: remote.URL()}}, MaxBackoff: 200 * time.Millisecond})
	fleettest.WaitCatalog(t, f.d, "ping")

	// The server goes away; while it is down it gains a tool, which only a
	// new session's tools/list can reveal.
	remote.stop()
	server.AddTool(&mcp.Tool{Name: "pong", InputSchema: object(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("ping"), nil
	})
	remote.start(remote.addr)
	fleettest.WaitCatalog(t, f.d, "ping", "pong") // the tools listed after reconnecting
	for _, c := range []struct{ tool, want string }{{"ping", "pong"}, {"pong", "ping"}} {
		r, _ := f.d.Call(t.Context(), c.tool, nil, dispatcher.WithTimeout(30*time.Second))
		if r.Content != c.want || r.IsError {
			t.Errorf("%s after the restart = %+v", c.tool, r)
		}
	}
}

// The end-to-end path: an MCP client calls, through the fleet's MCP
// server, a tool of a remote MCP server served by a worker.
func TestMCPClientThroughFleetToRemote(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	remote := newRemote(t, remoteTools())
	f.startBridge(mcptool.Config{Servers: []mcptool.Server{{URL: remote.URL(), Prefix: "remote_"}}})
	fleettest.WaitCatalog(t, f.d, "remote_a_b", "remote_a_b_2", "remote_broken", "remote_echo", "remote_echo_args", "remote_weather") // the remote tools

	h, err := mcpserver.New(t.Context(), mcpserver.Config{Dispatcher: f.d})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var weather *mcp.Tool
	for _, tool := range list.Tools {
		if tool.Name == "remote_weather" {
			weather = tool
		}
	}
	if weather == nil || weather.Annotations == nil || !weather.Annotations.ReadOnlyHint {
		t.Fatalf("remote_weather listed as %+v, want it with the remote's read-only annotation", weather)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "remote_weather", Arguments: map[string]any{"city": "Oslo"}})
	if err != nil || res.IsError {
		t.Fatalf("call = %+v, %v", res, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if string(b) != `{"city":"Oslo","temp":21.5}` {
		t.Errorf("structuredContent = %s", b)
	}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "remote_broken"})
	if err != nil || !res.IsError || res.Content[0].(*mcp.TextContent).Text != "upstream said no" {
		t.Errorf("remote_broken = %+v, %v; want isError with the remote's text", res, err)
	}
}
