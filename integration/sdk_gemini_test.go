package integration_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/genai"

	"github.com/windlass-dev/windlass"
)

// geminiCases are sdkCases and schemas with the JSON Schema keywords that
// Gemini's function declarations lack but that have a near form: oneOf,
// const, exclusive bounds, an enum of numbers.
func geminiCases(t *testing.T) []sdkCase {
	t.Helper()
	return append(sdkCases(t), sdkCase{
		name: "keywords_with_a_near_form",
		spec: windlass.Spec{
			Name:        "set_level",
			Description: "Set a level.",
			Parameters: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"mode":   map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}},
					"kind":   map[string]any{"const": "fixed"},
					"level":  map[string]any{"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
					"ratio":  map[string]any{"type": "number", "exclusiveMinimum": 0},
					"preset": map[string]any{"type": "integer", "enum": []any{1, 2, 3}},
					"flags": map[string]any{"type": "array", "items": map[string]any{
						"type": "object", "properties": map[string]any{"on": map[string]any{"const": true}}, "additionalProperties": false,
					}},
				},
				"required":             []string{"level"},
				"additionalProperties": false,
			},
		},
	})
}

// TestGeminiFunctionDeclaration: the StyleGemini rendering of every tool
// decodes into the Gemini Go SDK's own genai.FunctionDeclaration with no
// field unknown to it, every schema in it has a type genai knows (or is an
// anyOf), and the SDK encodes it back to what we rendered: nothing was
// dropped on the way in. The near forms of keywords Gemini lacks are those
// of geminiNearest (package windlass).
func TestGeminiFunctionDeclaration(t *testing.T) {
	t.Parallel()
	for _, tc := range geminiCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ours := sdkRender(t, tc.spec, windlass.StyleGemini)
			dec := json.NewDecoder(bytes.NewReader(ours))
			dec.DisallowUnknownFields()
			var fd genai.FunctionDeclaration
			if err := dec.Decode(&fd); err != nil {
				t.Fatalf("decode into genai.FunctionDeclaration: %v\nours: %s", err, ours)
			}
			if fd.Name != tc.spec.Name || fd.Description != tc.spec.Description || fd.Parameters == nil {
				t.Fatalf("genai.FunctionDeclaration name %q, description %q, parameters %v; want %q, %q and parameters", fd.Name, fd.Description, fd.Parameters, tc.spec.Name, tc.spec.Description)
			}
			geminiCheckTypes(t, "parameters", fd.Parameters)

			// In the SDK's request config, and back out.
			cfg := genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{&fd}}}}
			body, err := json.Marshal(cfg)
			if err != nil {
				t.Fatalf("SDK marshal GenerateContentConfig: %v", err)
			}
			var out struct {
				Tools []struct {
					FunctionDeclarations []json.RawMessage `json:"functionDeclarations"`
				} `json:"tools"`
			}
			if err := json.Unmarshal(body, &out); err != nil || len(out.Tools) != 1 || len(out.Tools[0].FunctionDeclarations) != 1 {
				t.Fatalf("SDK config %s: %v", body, err)
			}
			sdkAssertSameJSON(t, geminiOmitEmpty(t, ours), out.Tools[0].FunctionDeclarations[0], "genai GenerateContentConfig.tools[0].functionDeclarations[0]")
		})
	}

	// The near forms, as genai reads them.
	ours := sdkRender(t, geminiCases(t)[len(geminiCases(t))-1].spec, windlass.StyleGemini)
	var fd genai.FunctionDeclaration
	if err := json.Unmarshal(ours, &fd); err != nil {
		t.Fatal(err)
	}
	p := fd.Parameters.Properties
	if len(p["mode"].AnyOf) != 2 {
		t.Errorf("oneOf: mode has anyOf %v, want the two alternatives", p["mode"].AnyOf)
	}
	if k := p["kind"]; !strings.EqualFold(string(k.Type), string(genai.TypeString)) || len(k.Enum) != 1 || k.Enum[0] != "fixed" {
		t.Errorf("const \"fixed\": kind is type %q, enum %q; want a string with the one value", k.Type, k.Enum)
	}
	if l := p["level"]; l.Minimum == nil || *l.Minimum != 1 || l.Maximum == nil || *l.Maximum != 9 {
		t.Errorf("integer in (0, 10): level is [%v, %v], want [1, 9]", deref(l.Minimum), deref(l.Maximum))
	}
	if r := p["ratio"]; r.Minimum == nil || *r.Minimum != 0 {
		t.Errorf("number > 0: ratio's minimum is %v, want 0 (the nearest inclusive bound)", deref(r.Minimum))
	}
	if pr := p["preset"]; !strings.Contains(pr.Description, "One of: 1, 2, 3.") || !strings.EqualFold(string(pr.Type), string(genai.TypeInteger)) {
		t.Errorf("integer enum: preset is type %q, description %q; want an integer whose description lists 1, 2, 3", pr.Type, pr.Description)
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// geminiCheckTypes requires every schema under s to have a type genai knows
// (its constants are upper case; the API reads them in either case) or to
// be an anyOf.
func geminiCheckTypes(t *testing.T, path string, s *genai.Schema) {
	t.Helper()
	known := []genai.Type{genai.TypeString, genai.TypeNumber, genai.TypeInteger, genai.TypeBoolean, genai.TypeArray, genai.TypeObject}
	ok := len(s.AnyOf) > 0
	for _, k := range known {
		ok = ok || strings.EqualFold(string(s.Type), string(k))
	}
	if !ok {
		t.Errorf("%s: type %q, no anyOf: Gemini cannot tell what to send", path, s.Type)
	}
	for name, sub := range s.Properties {
		geminiCheckTypes(t, path+".properties."+name, sub)
	}
	if s.Items != nil {
		geminiCheckTypes(t, path+".items", s.Items)
	}
	for i, sub := range s.AnyOf {
		geminiCheckTypes(t, path+".anyOf["+string(rune('0'+i))+"]", sub)
	}
}

// geminiOmitEmpty drops what genai's encoding omits and the API reads the
// same way: an empty description and an empty properties object.
func geminiOmitEmpty(t *testing.T, ours []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ours, &m); err != nil {
		t.Fatal(err)
	}
	if m["description"] == "" {
		delete(m, "description")
	}
	if p, ok := m["parameters"].(map[string]any); ok {
		if props, ok := p["properties"].(map[string]any); ok && len(props) == 0 {
			delete(p, "properties")
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
