package integration_test

// These tests prove that the tool definitions windlass renders for
// StyleOpenAI and StyleAnthropic are exactly what the providers' official Go
// SDKs carry in their own request types. For each case the JSON we render is
// decoded into the SDK's request param type with json.Unmarshal (both SDKs'
// param types implement UnmarshalJSON through their internal apijson
// package), that value is put into the SDK's full request params
// (openai.ChatCompletionNewParams.Tools, anthropic.MessageNewParams.Tools)
// and re-encoded with the SDK's MarshalJSON, and the tool object the request
// body carries must be semantically equal to ours (both sides are decoded
// into `any`, so key order does not matter). A decoder that dropped
// everything could not pass: each test also checks that the decoded fields
// landed in the SDK's typed fields (name, description, parameters).

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/windlass-dev/windlass"
)

// sdkShipTo is a nested struct argument.
type sdkShipTo struct {
	Street  string `json:"street" jsonschema:"description=Street and house number"`
	City    string `json:"city"`
	Country string `json:"country,omitempty" jsonschema:"enum=DE,enum=FR,enum=US,default=US"`
}

// sdkLineItem is the element type of a slice argument.
type sdkLineItem struct {
	SKU      string `json:"sku" jsonschema_description:"Stock keeping unit"`
	Quantity int    `json:"quantity" jsonschema:"description=How many,minimum=1"`
}

// sdkOrderArgs has a nested struct, slices, an enum and description tags.
type sdkOrderArgs struct {
	Customer string        `json:"customer" jsonschema:"description=The customer's ID"`
	Priority string        `json:"priority,omitempty" jsonschema:"description=Handling priority,enum=low,enum=normal,enum=high"`
	Items    []sdkLineItem `json:"items" jsonschema_description:"What to ship"`
	Tags     []string      `json:"tags,omitempty"`
	ShipTo   sdkShipTo     `json:"ship_to"`
	Gift     bool          `json:"gift,omitempty"`
}

type sdkCase struct {
	name string
	spec windlass.Spec
}

// sdkCases are the tools every SDK test renders.
func sdkCases(t *testing.T) []sdkCase {
	t.Helper()
	order, err := windlass.Func("create_order",
		func(context.Context, sdkOrderArgs) (string, error) { return "ok", nil },
		windlass.WithDescription("Create an order for a customer."))
	if err != nil {
		t.Fatalf("windlass.Func: %v", err)
	}
	return []sdkCase{
		{name: "func_nested_struct_slice_enum", spec: order.Spec()},
		{
			// Nil Parameters: the default {"type":"object","properties":{}}.
			name: "no_arguments",
			spec: windlass.Spec{Name: "get_time", Description: "Return the current time."},
		},
		{
			// We always emit "description", even when it is empty.
			name: "no_arguments_no_description",
			spec: windlass.Spec{Name: "noop"},
		},
		{
			name: "hand_written_required_no_additional",
			spec: windlass.Spec{
				Name:        "search-docs",
				Description: "Search the documentation.",
				Parameters: map[string]any{
					"type": "object",
					"properties": map[string]any{
						"query": map[string]any{"type": "string", "description": "Full-text query", "minLength": 1},
						"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
						"filters": map[string]any{
							"type":                 "object",
							"properties":           map[string]any{"lang": map[string]any{"type": "string"}},
							"additionalProperties": false,
						},
						"sections": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					},
					"required":             []string{"query", "limit"},
					"additionalProperties": false,
				},
			},
		},
	}
}

// sdkRender returns the spec's schema in style, encoded as JSON: the bytes a
// caller would put into the provider's request.
func sdkRender(t *testing.T, spec windlass.Spec, style windlass.Style) []byte {
	t.Helper()
	m, err := spec.Schema(style)
	if err != nil {
		t.Fatalf("Schema(%s): %v", style, err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal our %s schema: %v", style, err)
	}
	return b
}

// sdkOurParameters returns the spec's parameters schema as plain JSON values.
func sdkOurParameters(t *testing.T, spec windlass.Spec) map[string]any {
	t.Helper()
	b, err := json.Marshal(spec.WithDefaults().Parameters)
	if err != nil {
		t.Fatalf("marshal parameters: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal parameters: %v", err)
	}
	return m
}

func TestOpenAIChatCompletionToolParam(t *testing.T) {
	t.Parallel()
	for _, tc := range sdkCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours := sdkRender(t, tc.spec, windlass.StyleOpenAI)

			var tool openai.ChatCompletionToolUnionParam
			if err := json.Unmarshal(ours, &tool); err != nil {
				t.Fatalf("decode into openai.ChatCompletionToolUnionParam: %v\nours: %s", err, ours)
			}
			fn := tool.OfFunction
			if fn == nil {
				t.Fatalf("decoded union has no function variant (OfFunction nil, OfCustom=%v)\nours: %s", tool.OfCustom != nil, ours)
			}
			sdkCheckOpenAIFunction(t, tc.spec, fn.Function)
			if got := tool.GetFunction(); got == nil || got.Name != tc.spec.Name {
				t.Errorf("union GetFunction() = %+v, want name %q", got, tc.spec.Name)
			}

			// Re-encode as part of the SDK's request body.
			req := openai.ChatCompletionNewParams{
				Model:    shared.ChatModel("gpt-test-model"), // any model; only tools is compared
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
				Tools:    []openai.ChatCompletionToolUnionParam{tool},
			}
			body, err := json.Marshal(req)
			if err != nil {
				t.Fatalf("SDK marshal ChatCompletionNewParams: %v", err)
			}
			sdkAssertSameJSON(t, ours, sdkFirstTool(t, body), "openai ChatCompletionNewParams.tools[0]")

			// The variant type alone encodes the same.
			var variant openai.ChatCompletionFunctionToolParam
			if err := json.Unmarshal(ours, &variant); err != nil {
				t.Fatalf("decode into openai.ChatCompletionFunctionToolParam: %v", err)
			}
			sdkCheckOpenAIFunction(t, tc.spec, variant.Function)
			vb, err := json.Marshal(variant)
			if err != nil {
				t.Fatalf("SDK marshal ChatCompletionFunctionToolParam: %v", err)
			}
			sdkAssertSameJSON(t, ours, vb, "openai ChatCompletionFunctionToolParam")

			// And the tool the SDK's own constructor builds from our fields.
			built := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:        tc.spec.Name,
				Description: openai.String(tc.spec.Description),
				Parameters:  shared.FunctionParameters(sdkOurParameters(t, tc.spec)),
			})
			bb, err := json.Marshal(built)
			if err != nil {
				t.Fatalf("SDK marshal constructed tool: %v", err)
			}
			sdkAssertSameJSON(t, ours, bb, "openai ChatCompletionFunctionTool(...) constructor")
		})
	}
}

// sdkCheckOpenAIFunction requires that the decoded fields really landed in
// the SDK's typed fields.
func sdkCheckOpenAIFunction(t *testing.T, spec windlass.Spec, def shared.FunctionDefinitionParam) {
	t.Helper()
	if def.Name != spec.Name {
		t.Errorf("SDK function Name = %q, want %q", def.Name, spec.Name)
	}
	if !def.Description.Valid() || def.Description.Value != spec.Description {
		t.Errorf("SDK function Description = %q (valid %v), want %q", def.Description.Value, def.Description.Valid(), spec.Description)
	}
	if def.Strict.Valid() {
		t.Errorf("SDK function Strict is set (%v); we emit no strict", def.Strict.Value)
	}
	if got, want := map[string]any(def.Parameters), sdkOurParameters(t, spec); !reflect.DeepEqual(got, want) {
		t.Errorf("SDK function Parameters differ from ours:\n%s", sdkDiffJSON(want, got))
	}
}

func TestAnthropicToolParam(t *testing.T) {
	t.Parallel()
	for _, tc := range sdkCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours := sdkRender(t, tc.spec, windlass.StyleAnthropic)

			var tool anthropic.ToolUnionParam
			if err := json.Unmarshal(ours, &tool); err != nil {
				t.Fatalf("decode into anthropic.ToolUnionParam: %v\nours: %s", err, ours)
			}
			if tool.OfTool == nil {
				t.Fatalf("decoded union has no custom-tool variant (OfTool nil)\nours: %s", ours)
			}
			sdkCheckAnthropicTool(t, tc.spec, *tool.OfTool)
			if got := tool.GetName(); got == nil || *got != tc.spec.Name {
				t.Errorf("union GetName() = %v, want %q", got, tc.spec.Name)
			}

			// Re-encode as part of the SDK's request body.
			req := anthropic.MessageNewParams{
				Model:     anthropic.Model("claude-test-model"), // any model; only tools is compared
				MaxTokens: 1024,
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
				Tools:     []anthropic.ToolUnionParam{tool},
			}
			body, err := json.Marshal(req)
			if err != nil {
				t.Fatalf("SDK marshal MessageNewParams: %v", err)
			}
			sdkAssertSameJSON(t, ours, sdkFirstTool(t, body), "anthropic MessageNewParams.tools[0]")

			// The variant type alone encodes the same.
			var variant anthropic.ToolParam
			if err := json.Unmarshal(ours, &variant); err != nil {
				t.Fatalf("decode into anthropic.ToolParam: %v", err)
			}
			sdkCheckAnthropicTool(t, tc.spec, variant)
			vb, err := json.Marshal(variant)
			if err != nil {
				t.Fatalf("SDK marshal ToolParam: %v", err)
			}
			sdkAssertSameJSON(t, ours, vb, "anthropic ToolParam")
		})
	}
}

// sdkCheckAnthropicTool requires that the decoded fields really landed in the
// SDK's typed fields: name, description, and the input schema split into its
// typed Properties/Required and the ExtraFields catch-all.
func sdkCheckAnthropicTool(t *testing.T, spec windlass.Spec, tool anthropic.ToolParam) {
	t.Helper()
	if tool.Name != spec.Name {
		t.Errorf("SDK tool Name = %q, want %q", tool.Name, spec.Name)
	}
	if !tool.Description.Valid() || tool.Description.Value != spec.Description {
		t.Errorf("SDK tool Description = %q (valid %v), want %q", tool.Description.Value, tool.Description.Valid(), spec.Description)
	}
	params := sdkOurParameters(t, spec)
	if got, want := tool.InputSchema.Properties, params["properties"]; !reflect.DeepEqual(got, want) {
		t.Errorf("SDK InputSchema.Properties differ from ours:\n%s", sdkDiffJSON(want, got))
	}
	var wantRequired []string
	if req, ok := params["required"].([]any); ok {
		for _, r := range req {
			wantRequired = append(wantRequired, r.(string))
		}
	}
	if !slices.Equal(tool.InputSchema.Required, wantRequired) {
		t.Errorf("SDK InputSchema.Required = %q, want %q", tool.InputSchema.Required, wantRequired)
	}
	for k, want := range params {
		switch k {
		case "type", "properties", "required":
			continue
		}
		if got, ok := tool.InputSchema.ExtraFields[k]; !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("SDK InputSchema.ExtraFields[%q] = %v (present %v), want %v", k, got, ok, want)
		}
	}
}

// sdkFirstTool returns tools[0] of an encoded request body.
func sdkFirstTool(t *testing.T, body []byte) []byte {
	t.Helper()
	var req struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decode SDK request body: %v\nbody: %s", err, body)
	}
	if len(req.Tools) != 1 {
		t.Fatalf("SDK request body has %d tools, want 1\nbody: %s", len(req.Tools), body)
	}
	return req.Tools[0]
}

// sdkAssertSameJSON fails with a path-by-path diff unless ours and sdk
// decode to equal values.
func sdkAssertSameJSON(t *testing.T, ours, sdk []byte, what string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(ours, &a); err != nil {
		t.Fatalf("decode ours: %v", err)
	}
	if err := json.Unmarshal(sdk, &b); err != nil {
		t.Fatalf("decode %s: %v\n%s", what, err, sdk)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s re-encoded differs from ours (- ours, + SDK):\n%s\nours: %s\nSDK:  %s", what, sdkDiffJSON(a, b), ours, sdk)
	}
}

// sdkDiffJSON lists the paths where two decoded JSON values differ.
func sdkDiffJSON(ours, sdk any) string {
	var lines []string
	sdkDiffAt("$", ours, sdk, &lines)
	if len(lines) == 0 {
		return "  (no difference in JSON values; Go types differ)"
	}
	return strings.Join(lines, "\n")
}

func sdkDiffAt(path string, a, b any, out *[]string) {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		keys := make(map[string]bool, len(am)+len(bm))
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			av, inA := am[k]
			bv, inB := bm[k]
			p := path + "." + k
			switch {
			case !inB:
				*out = append(*out, fmt.Sprintf("- %s: %s (dropped by the SDK)", p, sdkShow(av)))
			case !inA:
				*out = append(*out, fmt.Sprintf("+ %s: %s (added by the SDK)", p, sdkShow(bv)))
			default:
				sdkDiffAt(p, av, bv, out)
			}
		}
		return
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList && len(al) == len(bl) {
		for i := range al {
			sdkDiffAt(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("- %s: %s\n+ %s: %s", path, sdkShow(a), path, sdkShow(b)))
	}
}

func sdkShow(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}
