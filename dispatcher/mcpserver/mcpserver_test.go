package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

type addArgs struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type cityArgs struct {
	City string `json:"city"`
}

type weather struct {
	City string  `json:"city"`
	Temp float64 `json:"temp"`
}

// basicTools are the tools most tests serve.
func basicTools() []windlass.Tool {
	return []windlass.Tool{
		windlass.MustFunc("add", func(ctx context.Context, in addArgs) (float64, error) { return in.A + in.B, nil },
			windlass.WithDescription("Add two numbers.")),
		windlass.MustFunc("weather", func(ctx context.Context, in cityArgs) (weather, error) {
			return weather{City: in.City, Temp: 21.5}, nil
		}, windlass.WithDescription("Current weather."), windlass.WithHints(windlass.ToolHints{ReadOnly: new(true), OpenWorld: new(true)})),
		windlass.MustFunc("fail", func(ctx context.Context, in struct{}) (string, error) {
			return "", errors.New("the disk is full")
		}, windlass.WithHints(windlass.ToolHints{Destructive: new(false), Idempotent: new(true)})),
	}
}

func TestListAndCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker(worker.Config{}, basicTools()...)
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})}), nil)

	tools := listTools(t, cs)
	if len(tools) != 3 || tools["add"] == nil || tools["add"].Description != "Add two numbers." {
		t.Fatalf("tools = %v", tools)
	}
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "add", "weather", "fail")
	catalog, _ := d.Catalog(t.Context())
	for _, e := range catalog { // each tool's spec hash in its _meta
		if got := tools[e.Spec.Name].Meta[mcpserver.MetaSpecHash]; got != e.Hash {
			t.Errorf("%s: _meta[%q] = %v, want %q", e.Spec.Name, mcpserver.MetaSpecHash, got, e.Hash)
		}
	}
	schema, _ := json.Marshal(tools["add"].InputSchema)
	if !strings.Contains(string(schema), `"a":{"type":"number"}`) || !strings.Contains(string(schema), `"required":["a","b"]`) {
		t.Errorf("add's input schema = %s", schema)
	}

	tests := []struct {
		name       string
		tool       string
		args       any
		wantText   string
		wantError  bool
		wantCode   string
		wantStruct string // JSON of structuredContent; "" means none
	}{
		{name: "number", tool: "add", args: map[string]any{"a": 1, "b": 2}, wantText: "3"},
		{name: "structured", tool: "weather", args: map[string]any{"city": "Oslo"}, wantText: `{"city":"Oslo","temp":21.5}`, wantStruct: `{"city":"Oslo","temp":21.5}`},
		{name: "tool error", tool: "fail", args: map[string]any{}, wantText: "the disk is full", wantError: true, wantCode: "tool_error"},
		{name: "invalid arguments", tool: "add", args: map[string]any{"a": "one", "b": 2}, wantText: "$.a", wantError: true, wantCode: "invalid_arguments"},
		{name: "no arguments", tool: "fail", args: nil, wantText: "the disk is full", wantError: true, wantCode: "tool_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatalf("CallTool: %v (a tool's failure must be a result, not a protocol error)", err)
			}
			if res.IsError != tt.wantError || !strings.Contains(text(res), tt.wantText) {
				t.Errorf("result = isError %v %q, want isError %v containing %q", res.IsError, text(res), tt.wantError, tt.wantText)
			}
			if code, _ := res.Meta[mcpserver.MetaErrorCode].(string); code != tt.wantCode {
				t.Errorf("error code = %q, want %q", code, tt.wantCode)
			}
			if id, _ := res.Meta[mcpserver.MetaCallID].(string); tt.wantCode != "invalid_arguments" && id == "" {
				t.Errorf("no call id in _meta: %v", res.Meta)
			}
			got := ""
			if res.StructuredContent != nil {
				b, _ := json.Marshal(res.StructuredContent)
				got = string(b)
			}
			if got != tt.wantStruct {
				t.Errorf("structuredContent = %s, want %s", got, tt.wantStruct)
			}
		})
	}
}

func TestAnnotations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec windlass.Spec
		want string // JSON of the annotations; "null" for none
	}{
		{name: "no hints", spec: windlass.Spec{Name: "x"}, want: `null`},
		{name: "read-only", spec: windlass.Spec{Name: "x", Hints: &windlass.ToolHints{ReadOnly: new(true)}},
			want: `{"idempotentHint":false,"readOnlyHint":true}`},
		{name: "all four", spec: windlass.Spec{Name: "x", Hints: &windlass.ToolHints{ReadOnly: new(false), Destructive: new(false), Idempotent: new(true), OpenWorld: new(false)}},
			want: `{"destructiveHint":false,"idempotentHint":true,"openWorldHint":false,"readOnlyHint":false}`},
		{name: "gated without hints", spec: windlass.Spec{Name: "x", RequiresApproval: true},
			want: `{"destructiveHint":true,"idempotentHint":false,"readOnlyHint":false}`},
		{name: "gated claiming read-only and harmless", spec: windlass.Spec{Name: "x", RequiresApproval: true,
			Hints: &windlass.ToolHints{ReadOnly: new(true), Destructive: new(false), Idempotent: new(true), OpenWorld: new(false)}},
			want: `{"destructiveHint":true,"idempotentHint":true,"openWorldHint":false,"readOnlyHint":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(mcpserver.Annotations(tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("annotations = %s, want %s", b, tt.want)
			}
		})
	}
}

func TestAnnotationsListed(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	gated := windlass.MustFunc("wipe", func(ctx context.Context, in struct{}) (string, error) { return "wiped", nil },
		windlass.WithApproval(), windlass.WithHints(windlass.ToolHints{ReadOnly: new(true)}))
	f.startWorker(worker.Config{}, append(basicTools(), gated)...)
	tools := listTools(t, connect(t, serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})}), nil))
	if a := tools["add"].Annotations; a != nil {
		t.Errorf("add (no hints) has annotations %+v", a)
	}
	if a := tools["weather"].Annotations; a == nil || !a.ReadOnlyHint || a.OpenWorldHint == nil || !*a.OpenWorldHint {
		t.Errorf("weather annotations = %+v, want read-only, open world", a)
	}
	if a := tools["fail"].Annotations; a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint || !a.IdempotentHint {
		t.Errorf("fail annotations = %+v, want not destructive, idempotent", a)
	}
	if a := tools["wipe"].Annotations; a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Errorf("wipe (gated, hinted read-only) annotations = %+v, want readOnlyHint false and destructiveHint true", a)
	}
}
