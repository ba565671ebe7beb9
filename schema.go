package windlass

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Style names a model provider's format for tool definitions.
type Style string

// The schema styles [Spec.Schema] renders.
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

// Styles lists every style [Spec.Schema] accepts.
var Styles = []Style{StyleOpenAI, StyleAnthropic, StyleGemini}

// ParseStyle returns the style named s, or an error wrapping
// [ErrUnknownStyle] that names the valid ones. The empty string is openai.
func ParseStyle(s string) (Style, error) {
	switch st := Style(strings.ToLower(strings.TrimSpace(s))); st {
	case "":
		return StyleOpenAI, nil
	case StyleOpenAI, StyleAnthropic, StyleGemini:
		return st, nil
	}
	return "", fmt.Errorf("%w %q: use openai, anthropic or gemini", ErrUnknownStyle, s)
}

// Schema returns the tool definition in a provider's format, ready to drop
// into that provider's request. The result is a fresh value the caller may
// modify. For [StyleGemini], the JSON Schema keywords Gemini does not accept
// are removed recursively, and a name Gemini does not accept (one that starts
// with a digit or '-') is an error. An unknown style is an error wrapping
// [ErrUnknownStyle] that names the valid styles.
func (s Spec) Schema(style Style) (map[string]any, error) {
	s = s.WithDefaults()
	switch style {
	case StyleOpenAI:
		return map[string]any{
			"type": "function",
			"function": map[string]any{
				"name":        s.Name,
				"description": s.Description,
				"parameters":  normalizeJSON(s.Parameters),
			},
		}, nil
	case StyleAnthropic:
		return map[string]any{
			"name":         s.Name,
			"description":  s.Description,
			"input_schema": normalizeJSON(s.Parameters),
		}, nil
	case StyleGemini:
		if err := validateGeminiName(s.Name); err != nil {
			return nil, err
		}
		return map[string]any{
			"name":        s.Name,
			"description": s.Description,
			"parameters":  geminiSchema(normalizeJSON(s.Parameters)),
		}, nil
	}
	return nil, fmt.Errorf("%w %q: use openai, anthropic or gemini", ErrUnknownStyle, string(style))
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
// "Schema" (ai.google.dev/api/caching#Schema): type, format, title,
// description, nullable, enum, maxItems, minItems, properties, required,
// minProperties, maxProperties, minLength, maxLength, pattern, example,
// anyOf, propertyOrdering, default, items, minimum, maximum. Everything else
// ($ref, $defs, additionalProperties, oneOf, allOf, const, exclusiveMinimum,
// examples, $schema, ...) is rejected by function declarations and stripped.
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
// anyOf. A type list of one type and "null" (["string","null"]) becomes the
// type with nullable: true, which is how OpenAPI 3.0 spells it.
func geminiSchema(schema map[string]any) map[string]any {
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
