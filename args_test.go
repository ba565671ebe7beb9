package windlass_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
)

func TestArgumentValidationMessages(t *testing.T) {
	t.Parallel()
	args, err := windlass.CompileArguments(windlass.Spec{Name: "order", Parameters: map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"sku", "qty"},
		"properties": map[string]any{
			"sku":  map[string]any{"type": "string", "pattern": "^[A-Z]{3}$"},
			"qty":  map[string]any{"type": "integer", "minimum": 1},
			"ship": map[string]any{"type": "string", "enum": []string{"ground", "air"}},
			"tip":  map[string]any{"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100.5},
			"cap":  map[string]any{"type": "number", "maximum": 2.5},
			"lines": map[string]any{"type": "array", "items": map[string]any{
				"type": "object", "required": []string{"note"}, "properties": map[string]any{"note": map[string]any{"type": "string", "maxLength": 3}},
			}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     string
		wantPath string // "" means valid
		wantRule string
		wantText string
	}{
		{name: "valid", args: `{"sku":"ABC","qty":2}`},
		{name: "empty is an empty object", args: ``, wantPath: "$.sku", wantRule: "required", wantText: "missing"},
		{name: "missing one", args: `{"sku":"ABC"}`, wantPath: "$.qty", wantRule: "required", wantText: "required property is missing"},
		{name: "wrong type", args: `{"sku":"ABC","qty":"two"}`, wantPath: "$.qty", wantRule: "type", wantText: "want integer"},
		{name: "below minimum", args: `{"sku":"ABC","qty":0}`, wantPath: "$.qty", wantRule: "minimum", wantText: "must be at least 1, got 0"},
		{name: "at an exclusive minimum", args: `{"sku":"ABC","qty":1,"tip":0}`, wantPath: "$.tip", wantRule: "exclusiveMinimum", wantText: "must be greater than 0, got 0"},
		{name: "at an exclusive maximum", args: `{"sku":"ABC","qty":1,"tip":100.5}`, wantPath: "$.tip", wantRule: "exclusiveMaximum", wantText: "must be less than 100.5, got 100.5"},
		{name: "above maximum", args: `{"sku":"ABC","qty":1,"cap":3}`, wantPath: "$.cap", wantRule: "maximum", wantText: "must be at most 2.5, got 3"},
		{name: "pattern", args: `{"sku":"abc","qty":1}`, wantPath: "$.sku", wantRule: "pattern", wantText: "^[A-Z]{3}$"},
		{name: "enum", args: `{"sku":"ABC","qty":1,"ship":"sea"}`, wantPath: "$.ship", wantRule: "enum", wantText: "ground"},
		{name: "unknown field", args: `{"sku":"ABC","qty":1,"color":"red"}`, wantPath: "$", wantRule: "additionalProperties", wantText: "color"},
		{name: "nested array item", args: `{"sku":"ABC","qty":1,"lines":[{"note":"ok"},{"note":"long"}]}`, wantPath: "$.lines[1].note", wantRule: "maxLength", wantText: "3"},
		{name: "nested required", args: `{"sku":"ABC","qty":1,"lines":[{}]}`, wantPath: "$.lines[0].note", wantRule: "required"},
		{name: "not JSON", args: `{"sku":`, wantPath: "$", wantRule: "json", wantText: "not valid JSON"},
		{name: "not an object", args: `[1,2]`, wantPath: "$", wantRule: "type", wantText: "an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := args.Validate([]byte(tt.args))
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tt.args, err)
				}
				return
			}
			var ae *windlass.ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("Validate(%s) = %v, want *ArgumentError", tt.args, err)
			}
			if ae.Path != tt.wantPath || ae.Rule != tt.wantRule || !strings.Contains(ae.Message, tt.wantText) || ae.Tool != "order" {
				t.Errorf("Validate(%s) = path %q rule %q message %q tool %q; want path %q rule %q message containing %q",
					tt.args, ae.Path, ae.Rule, ae.Message, ae.Tool, tt.wantPath, tt.wantRule, tt.wantText)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.wantPath) || !strings.Contains(msg, tt.wantRule) {
				t.Errorf("Error() = %q does not name the path and the rule", msg)
			}
		})
	}
}

// TestArgumentErrorPathKeys: a path tells an object's key from an array's
// index. A key that is not a plain name ("0", "a.b", "a b", "") is written
// in brackets as a JSON string, so $.m["0"] is the key "0" of m and $.m[0]
// the first element of m.
func TestArgumentErrorPathKeys(t *testing.T) {
	t.Parallel()
	args, err := windlass.CompileArguments(windlass.Spec{Name: "keys", Parameters: map[string]any{
		"type": "object", "required": []string{"7"},
		"properties": map[string]any{
			"m": map[string]any{"type": []string{"object", "array"}, "additionalProperties": map[string]any{"type": "string"}, "items": map[string]any{"type": "string"}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args     string
		wantPath string
		wantRule string
	}{
		{`{"7":1,"m":{"0":1}}`, `$.m["0"]`, "type"},
		{`{"7":1,"m":["a",1]}`, `$.m[1]`, "type"},
		{`{"7":1,"m":{"0":1e999}}`, `$.m["0"]`, "number"},
		{`{"7":1,"m":[1e999]}`, `$.m[0]`, "number"},
		{`{"m":{}}`, `$["7"]`, "required"},
		{`{"7":1,"m":{"-1":1}}`, `$.m["-1"]`, "type"},
		{`{"7":1,"m":{"a.b":1}}`, `$.m["a.b"]`, "type"},
		{`{"7":1,"m":{"a b":1}}`, `$.m["a b"]`, "type"},
		{`{"7":1,"m":{"":1}}`, `$.m[""]`, "type"},
		{`{"7":1,"m":{"say \"hi\"":1}}`, `$.m["say \"hi\""]`, "type"},
		{`{"7":1,"m":{"city_2":1}}`, `$.m.city_2`, "type"},
		{`{"7":1,"m":{"città":1}}`, `$.m.città`, "type"},
	} {
		err := args.Validate([]byte(tt.args))
		var ae *windlass.ArgumentError
		if !errors.As(err, &ae) {
			t.Fatalf("Validate(%s) = %v, want *ArgumentError", tt.args, err)
		}
		if ae.Path != tt.wantPath || ae.Rule != tt.wantRule {
			t.Errorf("Validate(%s) = path %s rule %q; want path %s rule %q", tt.args, ae.Path, ae.Rule, tt.wantPath, tt.wantRule)
		}
	}
}
