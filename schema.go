package windlass

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Style names a model provider's format for tool definitions.
type Style string

// The schema styles [Spec.Schema] renders; [Styles] lists them.
const (
	// StyleOpenAI is OpenAI's function tool format, also used by Groq and
	// Ollama: {"type":"function","function":{name,description,parameters}}.
	StyleOpenAI Style = "openai"
	// StyleAnthropic is Anthropic's format: {name,description,input_schema}.
	StyleAnthropic Style = "anthropic"
	// StyleGemini is a Gemini function declaration:
	// {name,description,parameters} with unsupported keywords removed.
	StyleGemini Style = "gemini"
)

// DefaultStyle is the style an empty name means to [ParseStyle].
const DefaultStyle = StyleOpenAI

// styleTable is the one list of the schema styles. [Styles], [ParseStyle],
// [Spec.Schema] and [StyleChoices] (the valid styles as the errors, the HTTP
// API and the windlass command name them) derive from it, so a new style is
// a constant and an entry here; a test holds the HTTP API's OpenAPI
// document (a static file) to the list.
var styleTable = []struct {
	style  Style
	render func(Spec) (map[string]any, error) // of a spec with defaults
}{
	{StyleOpenAI, openAIDefinition},
	{StyleAnthropic, anthropicDefinition},
	{StyleGemini, geminiDefinition},
}

// Styles lists every style [Spec.Schema] accepts.
var Styles = func() []Style {
	out := make([]Style, len(styleTable))
	for i, e := range styleTable {
		out[i] = e.style
	}
	return out
}()

// StyleChoices names the valid styles for a person: "openai, anthropic or
// gemini".
func StyleChoices() string {
	var b strings.Builder
	for i, e := range styleTable {
		switch {
		case i == 0:
		case i == len(styleTable)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(string(e.style))
	}
	return b.String()
}

// ParseStyle returns the style named s (in any case), or an error wrapping
// [ErrUnknownStyle] that names the valid ones. The empty string is
// [DefaultStyle].
func ParseStyle(s string) (Style, error) {
	st := Style(strings.ToLower(strings.TrimSpace(s)))
	if st == "" {
		return DefaultStyle, nil
	}
	for _, e := range styleTable {
		if e.style == st {
			return st, nil
		}
	}
	return "", unknownStyle(s)
}

// unknownStyle is the error for a style name not in styleTable.
func unknownStyle(name string) error {
	return fmt.Errorf("%w %q: use %s", ErrUnknownStyle, name, StyleChoices())
}

// Schema returns the tool definition in a provider's format, ready to drop
// into that provider's request. The result is a fresh value the caller may
// modify. For [StyleGemini], the JSON Schema keywords Gemini does not accept
// are mapped to their nearest form when they have one (oneOf to anyOf,
// const to a one-value enum, exclusive bounds to inclusive ones) and
// removed otherwise, recursively, and a name Gemini does not accept (one that starts
// with a digit or '-') is an error. An unknown style is an error wrapping
// [ErrUnknownStyle] that names the valid styles.
func (s Spec) Schema(style Style) (map[string]any, error) {
	for _, e := range styleTable {
		if e.style == style {
			return e.render(s.WithDefaults())
		}
	}
	return nil, unknownStyle(string(style))
}

// openAIDefinition renders s in [StyleOpenAI].
func openAIDefinition(s Spec) (map[string]any, error) {
	return map[string]any{
		"type": "function",
		"function": map[string]any{
			"name":        s.Name,
			"description": s.Description,
			"parameters":  normalizeJSON(s.Parameters),
		},
	}, nil
}

// anthropicDefinition renders s in [StyleAnthropic].
func anthropicDefinition(s Spec) (map[string]any, error) {
	return map[string]any{
		"name":         s.Name,
		"description":  s.Description,
		"input_schema": normalizeJSON(s.Parameters),
	}, nil
}

// geminiDefinition renders s in [StyleGemini].
func geminiDefinition(s Spec) (map[string]any, error) {
	if err := validateGeminiName(s.Name); err != nil {
		return nil, err
	}
	return map[string]any{
		"name":        s.Name,
		"description": s.Description,
		"parameters":  geminiSchema(normalizeJSON(s.Parameters)),
	}, nil
}

// validateGeminiName applies Gemini's rule for a FunctionDeclaration name
// ("must start with a letter or an underscore", then letters, digits,
// underscores, colons, dots and dashes, at most 64 characters; Gemini API
// reference, FunctionDeclaration.name). Fleet names are already a subset of
// the characters, so only the first character can break it.
func validateGeminiName(name string) error {
	if name == "" {
		return fmt.Errorf("windlass: gemini style: the tool name is empty")
	}
	if c := name[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
		return fmt.Errorf("windlass: gemini style: tool name %q must start with a letter or an underscore for Gemini (it starts with %q); rename the tool to use it with Gemini", name, rune(c))
	}
	return nil
}

// geminiKeywords are the fields of the Gemini API's Schema object (a subset
// of the OpenAPI 3.0 schema object), from Google's Gemini API reference,
// "Schema" (ai.google.dev/api/caching#Schema), and the fields of genai.Schema
// in Google's Go SDK (google.golang.org/genai), which a test decodes every
// rendering into: type, format, title, description, nullable, enum,
// maxItems, minItems, properties, required, minProperties, maxProperties,
// minLength, maxLength, pattern, example, anyOf, propertyOrdering, default,
// items, minimum, maximum. Of the rest, geminiNearest first maps those that
// have a near form (oneOf, const, exclusiveMinimum, exclusiveMaximum, an enum
// of other values than strings); everything else ($ref, $defs,
// additionalProperties, allOf, examples, $schema, ...) is stripped.
var geminiKeywords = map[string]bool{
	"type": true, "format": true, "title": true, "description": true,
	"nullable": true, "enum": true, "maxItems": true, "minItems": true,
	"properties": true, "required": true, "minProperties": true,
	"maxProperties": true, "minLength": true, "maxLength": true,
	"pattern": true, "example": true, "anyOf": true, "propertyOrdering": true,
	"default": true, "items": true, "minimum": true, "maximum": true,
}

// geminiSchema returns a copy of a JSON Schema with only the keywords Gemini
// accepts, applied recursively to the subschemas under properties, items and
// anyOf, after geminiNearest has mapped each keyword that has a near form. A
// type list of one type and "null" (["string","null"]) becomes the type with
// nullable: true, which is how OpenAPI 3.0 spells it; a list of several
// types becomes an anyOf of each.
func geminiSchema(schema map[string]any) map[string]any {
	schema = geminiNearest(schema)
	out := make(map[string]any, len(schema))
	for k, v := range schema {
		if !geminiKeywords[k] {
			continue
		}
		switch k {
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				continue
			}
			cp := make(map[string]any, len(props))
			for name, sub := range props { // keys are property names, not keywords
				if m, ok := sub.(map[string]any); ok {
					cp[name] = geminiSchema(m)
				}
			}
			out[k] = cp
		case "items":
			if m, ok := v.(map[string]any); ok {
				out[k] = geminiSchema(m)
			}
		case "anyOf":
			list, ok := v.([]any)
			if !ok {
				continue
			}
			cp := make([]any, 0, len(list))
			for _, sub := range list {
				if m, ok := sub.(map[string]any); ok {
					cp = append(cp, geminiSchema(m))
				}
			}
			out[k] = cp
		case "type":
			if list, ok := v.([]any); ok {
				var types []any
				for _, t := range list {
					if t == "null" {
						out["nullable"] = true
					} else {
						types = append(types, t)
					}
				}
				if len(types) == 1 {
					out[k] = types[0]
				} else if len(types) > 1 {
					anyOf := make([]any, len(types))
					for i, t := range types {
						anyOf[i] = map[string]any{"type": t}
					}
					out["anyOf"] = anyOf
				}
				continue
			}
			out[k] = v
		default:
			out[k] = v // the input is a fresh copy from normalizeJSON
		}
	}
	return out
}

// geminiNearest rewrites the keywords of one schema node that Gemini does
// not accept but that have a near form it does (the node is a fresh copy,
// changed in place):
//
//   - oneOf becomes anyOf (a value the model sends matches one of them
//     either way; only "exactly one" is lost);
//   - const becomes a one-value enum for a string, the type for a boolean,
//     and minimum = maximum for a number; the type is added when missing;
//   - exclusiveMinimum and exclusiveMaximum (a number, or draft 4's boolean
//     beside minimum/maximum) become minimum and maximum: one more or less
//     for an integer, the bound itself for a number (its nearest inclusive
//     form; the fleet's own validation still refuses the bound itself);
//   - an enum of other values than strings (Gemini's enum holds strings)
//     moves into the description, "One of: 1, 2, 3."
func geminiNearest(n map[string]any) map[string]any {
	if one, ok := n["oneOf"]; ok {
		if _, has := n["anyOf"]; !has {
			n["anyOf"] = one
		}
		delete(n, "oneOf")
	}
	if c, ok := n["const"]; ok {
		delete(n, "const")
		switch c := c.(type) {
		case string:
			n["enum"] = []any{c}
			setDefault(n, "type", "string")
		case bool:
			setDefault(n, "type", "boolean")
		case float64:
			n["minimum"], n["maximum"] = c, c
			if c == math.Trunc(c) {
				setDefault(n, "type", "integer")
			}
			setDefault(n, "type", "number")
		}
	}
	integer := n["type"] == "integer"
	for _, b := range []struct {
		exclusive, inclusive string
		nextInteger          func(float64) float64 // the nearest integer within an exclusive bound
		tighter              func(a, b float64) float64
	}{
		{"exclusiveMinimum", "minimum", func(x float64) float64 { return math.Floor(x) + 1 }, math.Max},
		{"exclusiveMaximum", "maximum", func(x float64) float64 { return math.Ceil(x) - 1 }, math.Min},
	} {
		v, ok := n[b.exclusive]
		if !ok {
			continue
		}
		delete(n, b.exclusive)
		bound, ok := v.(float64)
		if !ok { // draft 4: a boolean that makes the inclusive bound exclusive
			bound, ok = n[b.inclusive].(float64)
			if !ok || v != true {
				continue
			}
			delete(n, b.inclusive)
		}
		if integer {
			bound = b.nextInteger(bound)
		}
		if cur, ok := n[b.inclusive].(float64); ok {
			bound = b.tighter(cur, bound)
		}
		n[b.inclusive] = bound
	}
	if enum, ok := n["enum"].([]any); ok && slices.ContainsFunc(enum, func(v any) bool { _, s := v.(string); return !s }) {
		delete(n, "enum")
		vals := make([]string, len(enum))
		for i, v := range enum {
			b, _ := json.Marshal(v)
			vals[i] = string(b)
		}
		desc, _ := n["description"].(string)
		n["description"] = strings.TrimSpace(desc + " One of: " + strings.Join(vals, ", ") + ".")
	}
	return n
}

// setDefault sets m[k] to v unless m has k.
func setDefault(m map[string]any, k string, v any) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// normalizeJSON returns a deep copy of a schema made only of the types
// encoding/json decodes into (map[string]any, []any, string, float64, bool,
// nil), whatever Go values it was written with ([]string, nested structs).
// Validate has already checked that the schema encodes.
func normalizeJSON(schema map[string]any) map[string]any {
	b, err := json.Marshal(schema)
	if err != nil {
		return map[string]any{}
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil || out == nil {
		return map[string]any{}
	}
	return out
}
