package windlass

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ArgumentsSchema is a tool's parameters schema compiled for validating
// arguments. Compile it once per spec with [CompileArguments]; Validate is
// safe for concurrent use.
type ArgumentsSchema struct {
	tool   string
	schema *jsonschema.Schema
}

var englishPrinter = message.NewPrinter(language.English)

// CompileArguments compiles spec's parameters schema (JSON Schema draft
// 2020-12 unless the schema says otherwise). An invalid schema is an error
// wrapping [ErrInvalidSpec].
func CompileArguments(spec Spec) (*ArgumentsSchema, error) {
	spec = spec.WithDefaults()
	raw, err := json.Marshal(spec.Parameters)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters: %w", ErrInvalidSpec, spec.Name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters: %w", ErrInvalidSpec, spec.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "windlass:///parameters.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters: %w", ErrInvalidSpec, spec.Name, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters are not a valid JSON Schema: %w", ErrInvalidSpec, spec.Name, err)
	}
	return &ArgumentsSchema{tool: spec.Name, schema: s}, nil
}

// Validate checks raw arguments against the schema. Empty or null
// arguments are {}.
// A failure is an *[ArgumentError] naming the path and the rule of the first
// violation (the most specific one when several nested rules fail).
func (a *ArgumentsSchema) Validate(args json.RawMessage) error {
	if noArguments(args) {
		args = json.RawMessage("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgumentError{Tool: a.tool, Path: "$", Rule: "json", Message: "arguments are not valid JSON: " + err.Error()}
	}
	if _, ok := v.(map[string]any); !ok {
		return &ArgumentError{Tool: a.tool, Path: "$", Rule: "type", Message: fmt.Sprintf("arguments must be a JSON object, got %s", jsonKind(v))}
	}
	err = a.schema.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return &ArgumentError{Tool: a.tool, Path: "$", Rule: "schema", Message: err.Error()}
	}
	leaf := deepest(ve)
	path := jsonPath(leaf.InstanceLocation)
	rule := "schema"
	if kw := leaf.ErrorKind.KeywordPath(); len(kw) > 0 {
		rule = kw[len(kw)-1]
	}
	msg := leaf.ErrorKind.LocalizedString(englishPrinter)
	if req, ok := leaf.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		path = jsonPath(append(append([]string(nil), leaf.InstanceLocation...), req.Missing[0]))
		msg = "required property is missing"
		if len(req.Missing) > 1 {
			msg = fmt.Sprintf("required properties are missing: %s", strings.Join(req.Missing, ", "))
		}
	}
	return &ArgumentError{Tool: a.tool, Path: path, Rule: rule, Message: msg}
}

// deepest follows the first cause down to the most specific violation.
func deepest(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}

// jsonPath renders an instance location as "$.a.b[0]".
func jsonPath(loc []string) string {
	var b strings.Builder
	b.WriteString("$")
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
		} else {
			b.WriteString("." + tok)
		}
	}
	return b.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
