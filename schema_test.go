package windlass_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
)

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func weatherSpec() windlass.Spec {
	return windlass.Spec{
		Name:        "get_weather",
		Description: "Current weather for a city.",
		Parameters: map[string]any{
			"$schema":              "https://json-schema.org/draft/2020-12/schema",
			"type":                 "object",
			"additionalProperties": false,
			"properties": map[string]any{
				"city":  map[string]any{"type": "string", "description": "City name", "minLength": 1},
				"units": map[string]any{"type": "string", "enum": []string{"c", "f"}, "default": "c"},
			},
			"required": []string{"city"},
		},
	}
}

func TestSchemaGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		style windlass.Style
		want  string
	}{
		{windlass.StyleOpenAI, `{"function":{"description":"Current weather for a city.","name":"get_weather","parameters":{"$schema":"https://json-schema.org/draft/2020-12/schema","additionalProperties":false,"properties":{"city":{"description":"City name","minLength":1,"type":"string"},"units":{"default":"c","enum":["c","f"],"type":"string"}},"required":["city"],"type":"object"}},"type":"function"}`},
		{windlass.StyleAnthropic, `{"description":"Current weather for a city.","input_schema":{"$schema":"https://json-schema.org/draft/2020-12/schema","additionalProperties":false,"properties":{"city":{"description":"City name","minLength":1,"type":"string"},"units":{"default":"c","enum":["c","f"],"type":"string"}},"required":["city"],"type":"object"},"name":"get_weather"}`},
		{windlass.StyleGemini, `{"description":"Current weather for a city.","name":"get_weather","parameters":{"properties":{"city":{"description":"City name","minLength":1,"type":"string"},"units":{"default":"c","enum":["c","f"],"type":"string"}},"required":["city"],"type":"object"}}`},
	}
	for _, tt := range tests {
		t.Run(string(tt.style), func(t *testing.T) {
			t.Parallel()
			got, err := weatherSpec().Schema(tt.style)
			if err != nil {
				t.Fatal(err)
			}
			if s := mustJSON(t, got); s != tt.want {
				t.Errorf("Schema(%s) =\n%s\nwant\n%s", tt.style, s, tt.want)
			}
		})
	}
}

func TestSchemaDefaultParameters(t *testing.T) {
	t.Parallel()
	got, err := windlass.Spec{Name: "ping", Description: "Ping."}.Schema(windlass.StyleAnthropic)
	if err != nil {
		t.Fatal(err)
	}
	if s := mustJSON(t, got); s != `{"description":"Ping.","input_schema":{"properties":{},"type":"object"},"name":"ping"}` {
		t.Errorf("got %s", s)
	}
}

func TestSchemaIsACopy(t *testing.T) {
	t.Parallel()
	spec := weatherSpec()
	got, _ := spec.Schema(windlass.StyleAnthropic)
	got["input_schema"].(map[string]any)["properties"].(map[string]any)["city"] = "mutated"
	again, _ := spec.Schema(windlass.StyleAnthropic)
	if mustJSON(t, again) == mustJSON(t, got) {
		t.Error("mutating a rendered schema changed the spec")
	}
}

func TestGeminiStripsNestedKeywords(t *testing.T) {
	t.Parallel()
	spec := windlass.Spec{Name: "nested", Parameters: map[string]any{
		"type": "object", "$defs": map[string]any{"x": map[string]any{}}, "additionalProperties": false,
		"properties": map[string]any{
			// A property whose *name* is a stripped keyword must survive.
			"additionalProperties": map[string]any{"type": "string", "const": "x"},
			"point": map[string]any{
				"type": "object", "additionalProperties": false,
				"properties": map[string]any{"x": map[string]any{"type": "number", "exclusiveMinimum": 0, "minimum": 1}},
			},
			"tags": map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{"type": "string", "$comment": "c", "examples": []string{"a"}}},
			"either": map[string]any{"anyOf": []any{
				map[string]any{"type": "string", "contentEncoding": "base64"},
				map[string]any{"type": "object", "patternProperties": map[string]any{"^a": map[string]any{}}, "properties": map[string]any{"k": map[string]any{"type": "integer", "multipleOf": 2}}},
			}},
			"maybe": map[string]any{"type": []any{"string", "null"}},
			"oneof": map[string]any{"oneOf": []any{map[string]any{"type": "string"}}, "description": "kept"},
		},
	}}
	got, err := spec.Schema(windlass.StyleGemini)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"properties":{"additionalProperties":{"enum":["x"],"type":"string"},"either":{"anyOf":[{"type":"string"},{"properties":{"k":{"type":"integer"}},"type":"object"}]},"maybe":{"nullable":true,"type":"string"},"oneof":{"anyOf":[{"type":"string"}],"description":"kept"},"point":{"properties":{"x":{"minimum":1,"type":"number"}},"type":"object"},"tags":{"items":{"type":"string"},"type":"array"}},"type":"object"}`
	if s := mustJSON(t, got["parameters"]); s != want {
		t.Errorf("gemini parameters =\n%s\nwant\n%s", s, want)
	}
}

func TestGeminiName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"2fa", "-dash"} {
		_, err := windlass.Spec{Name: name}.Schema(windlass.StyleGemini)
		if err == nil || !strings.Contains(err.Error(), "must start with a letter or an underscore") || !strings.Contains(err.Error(), name) {
			t.Errorf("Schema(gemini) for %q = %v, want an error naming Gemini's rule and the name", name, err)
		}
		if _, err := (windlass.Spec{Name: name}).Schema(windlass.StyleOpenAI); err != nil {
			t.Errorf("Schema(openai) for %q = %v: valid fleet name must render for openai", name, err)
		}
	}
	if _, err := (windlass.Spec{Name: "_ok"}).Schema(windlass.StyleGemini); err != nil {
		t.Errorf("underscore-first name: %v", err)
	}
}

func TestUnknownStyle(t *testing.T) {
	t.Parallel()
	_, err := windlass.Spec{Name: "x"}.Schema("mistral")
	if !errors.Is(err, windlass.ErrUnknownStyle) {
		t.Fatalf("err = %v, want ErrUnknownStyle", err)
	}
	for _, s := range []string{"mistral", "openai", "anthropic", "gemini"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if _, err := windlass.ParseStyle("Gemini"); err != nil {
		t.Errorf("ParseStyle(Gemini) = %v", err)
	}
	if _, err := windlass.ParseStyle("xml"); !errors.Is(err, windlass.ErrUnknownStyle) {
		t.Errorf("ParseStyle(xml) = %v", err)
	}
}

// TestStylesFromOneTable checks that the styles' list, their parsing, their
// rendering and the text naming them agree: every style in Styles parses
// as itself (in any case) and renders, the choices name each of them once,
// and an unknown style's error quotes the choices.
func TestStylesFromOneTable(t *testing.T) {
	t.Parallel()
	if !slices.Contains(windlass.Styles, windlass.DefaultStyle) {
		t.Errorf("DefaultStyle %q is not in Styles %v", windlass.DefaultStyle, windlass.Styles)
	}
	if st, err := windlass.ParseStyle(" "); st != windlass.DefaultStyle || err != nil {
		t.Errorf("ParseStyle(blank) = %q, %v; want DefaultStyle", st, err)
	}
	choices := windlass.StyleChoices()
	last := windlass.Styles[len(windlass.Styles)-1]
	if !strings.HasSuffix(choices, " or "+string(last)) || strings.Count(choices, " or ") != 1 {
		t.Errorf("StyleChoices() = %q, want the styles listed as \"a, b or c\"", choices)
	}
	for _, style := range windlass.Styles {
		for _, name := range []string{string(style), strings.ToUpper(string(style))} {
			if st, err := windlass.ParseStyle(name); st != style || err != nil {
				t.Errorf("ParseStyle(%q) = %q, %v; want %q", name, st, err, style)
			}
		}
		if _, err := (windlass.Spec{Name: "ping"}).Schema(style); err != nil {
			t.Errorf("Schema(%q) = %v", style, err)
		}
		if n := strings.Count(choices, string(style)); n != 1 {
			t.Errorf("StyleChoices() %q names %q %d times, want once", choices, style, n)
		}
	}
	for _, name := range []string{"claude", "xml"} {
		_, err := windlass.ParseStyle(name)
		want := `windlass: unknown schema style "` + name + `": use ` + choices
		if !errors.Is(err, windlass.ErrUnknownStyle) || err.Error() != want {
			t.Errorf("ParseStyle(%q) = %v, want %q", name, err, want)
		}
		if _, err := (windlass.Spec{Name: "ping"}).Schema(windlass.Style(name)); err == nil || err.Error() != want {
			t.Errorf("Schema(%q) = %v, want %q", name, err, want)
		}
	}
}

// TestGeminiNearestForms: a keyword Gemini does not accept but that has a
// near form it does is mapped to it, not stripped to a schema with no type.
func TestGeminiNearestForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"type":"integer","exclusiveMinimum":0}`, `{"minimum":1,"type":"integer"}`},
		{`{"type":"number","exclusiveMinimum":0}`, `{"minimum":0,"type":"number"}`},
		{`{"type":"integer","exclusiveMaximum":5.5}`, `{"maximum":5,"type":"integer"}`},
		{`{"type":"integer","exclusiveMaximum":5}`, `{"maximum":4,"type":"integer"}`},
		{`{"type":"integer","minimum":3,"exclusiveMinimum":true}`, `{"minimum":4,"type":"integer"}`},
		{`{"type":"integer","minimum":10,"exclusiveMinimum":0}`, `{"minimum":10,"type":"integer"}`},
		{`{"const":"x"}`, `{"enum":["x"],"type":"string"}`},
		{`{"const":3}`, `{"maximum":3,"minimum":3,"type":"integer"}`},
		{`{"const":0.5}`, `{"maximum":0.5,"minimum":0.5,"type":"number"}`},
		{`{"const":true}`, `{"type":"boolean"}`},
		{`{"type":"integer","enum":[1,2,3],"description":"Level."}`, `{"description":"Level. One of: 1, 2, 3.","type":"integer"}`},
		{`{"oneOf":[{"type":"string"},{"const":2}]}`, `{"anyOf":[{"type":"string"},{"maximum":2,"minimum":2,"type":"integer"}]}`},
	} {
		var prop map[string]any
		if err := json.Unmarshal([]byte(tc.in), &prop); err != nil {
			t.Fatal(err)
		}
		spec := windlass.Spec{Name: "t", Parameters: map[string]any{"type": "object", "properties": map[string]any{"p": prop}}}
		got, err := spec.Schema(windlass.StyleGemini)
		if err != nil {
			t.Fatal(err)
		}
		params := got["parameters"].(map[string]any)
		if s := mustJSON(t, params["properties"].(map[string]any)["p"]); s != tc.want {
			t.Errorf("gemini form of %s = %s, want %s", tc.in, s, tc.want)
		}
	}
}
