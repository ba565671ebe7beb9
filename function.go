package windlass

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/windlass-dev/windlass/internal/wirejson"
)

// FuncOption configures a tool made by [Func].
type FuncOption func(*Spec)

// WithDescription sets the model-facing description.
func WithDescription(text string) FuncOption {
	return func(s *Spec) { s.Description = text }
}

// WithDoc sets the description to the first non-empty line of a doc
// comment, the way a docstring's summary line describes a function.
func WithDoc(doc string) FuncOption {
	return func(s *Spec) { s.Description = firstLine(doc) }
}

// WithTimeout sets the tool's per-attempt timeout (default [DefaultTimeout]).
func WithTimeout(d time.Duration) FuncOption {
	return func(s *Spec) { s.Timeout = d }
}

// WithMaxArgumentValues sets the bound on the JSON values of a call's
// arguments (default [DefaultMaxArgumentValues]; see
// [Spec.MaxArgumentValues]).
func WithMaxArgumentValues(n int) FuncOption {
	return func(s *Spec) { s.MaxArgumentValues = n }
}

// WithApproval marks the tool as requiring a human's approval per call.
func WithApproval() FuncOption {
	return func(s *Spec) { s.RequiresApproval = true }
}

// WithApprovalCondition gates the calls of the tool for which expr, a CEL
// condition over the arguments, is true (see [Spec.ApprovalCondition]).
func WithApprovalCondition(expr string) FuncOption {
	return func(s *Spec) { s.ApprovalCondition = expr }
}

func firstLine(doc string) string {
	for line := range strings.SplitSeq(doc, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// FuncTool is a [Tool] made from a typed Go function by [Func].
type FuncTool[In, Out any] struct {
	spec Spec
	args *ArgumentsSchema
	fn   func(context.Context, In) (Out, error)
}

// Func makes a tool from a typed function, the counterpart of a @tool
// decorator. The parameters schema is derived from In, which must be a
// struct: a field's JSON name comes from its json tag; a field without
// omitempty (or omitzero) is required; `jsonschema:"description=…,enum=a,enum=b,default=…"`
// and `jsonschema_description:"…"` tags add descriptions, enums and defaults.
// The schema is fully inlined (no $ref, $defs, $schema or $id, which model
// providers reject), so recursive types are refused.
//
// Arguments are checked against the schema, then decoded into In, before fn
// runs. Out can be any JSON-encodable type.
func Func[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...FuncOption) (*FuncTool[In, Out], error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: tool %q: the function is nil", ErrInvalidSpec, name)
	}
	params, err := SchemaOf[In]()
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %w", ErrInvalidSpec, name, err)
	}
	spec := Spec{Name: name, Parameters: params}
	for _, opt := range opts {
		opt(&spec)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	args, err := CompileArguments(spec)
	if err != nil {
		return nil, err
	}
	return &FuncTool[In, Out]{spec: spec, args: args, fn: fn}, nil
}

// MustFunc is like [Func] but panics on error; for package-level tools whose
// definition is fixed at compile time.
func MustFunc[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...FuncOption) *FuncTool[In, Out] {
	t, err := Func(name, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// Spec implements [Tool].
func (t *FuncTool[In, Out]) Spec() Spec { return t.spec }

// Call implements [Tool]: it validates and decodes args into In and calls
// the function.
func (t *FuncTool[In, Out]) Call(ctx context.Context, args json.RawMessage) (any, error) {
	return callBound(ctx, t, args)
}

func (t *FuncTool[In, Out]) bind(args json.RawMessage) (func(context.Context) (any, error), error) {
	if err := t.args.Validate(args); err != nil {
		return nil, err
	}
	var in In
	if !noArguments(args) {
		// encoding/json's decoding, from its next implementation: 1
		// allocation instead of 6 for a small object (see wirejson). Its
		// errors are worded alike, but for a ",string" field's bad value.
		if err := wirejson.Decode(args, &in); err != nil {
			return nil, &ArgumentError{Tool: t.spec.Name, Path: "$", Rule: "decode", Message: err.Error()}
		}
	}
	return func(ctx context.Context) (any, error) { return t.fn(ctx, in) }, nil
}

// SchemaOf derives the JSON Schema object of a struct type T the way [Func]
// does, fully inlined.
func SchemaOf[T any]() (map[string]any, error) {
	typ := reflect.TypeFor[T]()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("parameters: the input type %s must be a struct (model providers require an object of arguments)", typ)
	}
	if path := recursion(typ, nil); path != "" {
		return nil, fmt.Errorf("parameters: type %s is recursive (%s) and cannot be inlined", typ, path)
	}
	r := &jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}
	b, err := json.Marshal(r.ReflectFromType(typ))
	if err != nil {
		return nil, fmt.Errorf("parameters: encode schema of %s: %w", typ, err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		return nil, fmt.Errorf("parameters: decode schema of %s: %w", typ, err)
	}
	delete(schema, "$schema")
	delete(schema, "$id")
	if _, ok := schema["properties"]; !ok {
		schema["properties"] = map[string]any{}
	}
	return schema, nil
}

// recursion returns a description of a cycle reachable from t, or "".
func recursion(t reflect.Type, stack []reflect.Type) string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	for i, s := range stack {
		if s == t {
			names := make([]string, 0, len(stack)-i+1)
			for _, c := range stack[i:] {
				names = append(names, c.String())
			}
			return strings.Join(append(names, t.String()), " → ")
		}
	}
	stack = append(stack, t)
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Tag.Get("json") == "-" {
			continue
		}
		if p := recursion(f.Type, stack); p != "" {
			return p
		}
	}
	return ""
}
