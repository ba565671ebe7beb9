package windlass_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
)

// TestHostileArguments validates arguments built to hurt: numbers the
// schema library cannot represent (they used to panic it), deep nesting,
// huge keys and values, wrong types. Each is refused with the path and the
// rule, quoting little of the input.
func TestHostileArguments(t *testing.T) {
	t.Parallel()
	schema := orderSchema(t)
	const valid = `"customer":{"email":"a@b.c","name":"x"},"items":[{"sku":"ABC-1234","qty":1}]`
	huge := strings.Repeat("K", 1<<20)
	tests := []struct {
		name     string
		args     string
		wantPath string // "" means valid
		// wantPathEnd, when set, makes wantPath the start of a path elided
		// in the middle that ends with wantPathEnd.
		wantPathEnd string
		wantRule    string
		wantText    string
	}{
		{name: "valid", args: `{` + valid + `}`},
		{name: "huge exponent", args: `{` + valid + `,"scores":[1e1000000000]}`, wantPath: "$.scores[0]", wantRule: "number", wantText: "1e1000000000 is out of range"},
		{name: "tiny exponent", args: `{` + valid + `,"scores":[1,1e-1000000000]}`, wantPath: "$.scores[1]", wantRule: "number", wantText: "exponent"},
		{name: "zero with an exponent beyond int64", args: `{` + valid + `,"scores":[0e99999999999999999999]}`, wantPath: "$.scores[0]", wantRule: "number"},
		{name: "long number", args: `{` + valid + `,"scores":[` + strings.Repeat("9", 101) + `]}`, wantPath: "$.scores[0]", wantRule: "number", wantText: "at most 100 characters"},
		{name: "many unique big numbers", args: `{` + valid + `,"scores":[` + strings.TrimSuffix(strings.Repeat("1e999999,", 30), ",") + `]}`, wantPath: "$.scores[0]", wantRule: "number"},
		{name: "largest exponent", args: `{` + valid + `,"scores":[1e-400, 1E+400]}`, wantPath: "$.scores[1]", wantRule: "maximum"},
		{name: "10k levels", args: `{` + valid + `,"filter":{"op":"eq","value":` + nested(10_000) + `}}`, wantPath: "$", wantRule: "json", wantText: "not valid JSON"},
		{name: "100k levels", args: nested(100_000), wantPath: "$", wantRule: "json", wantText: "not valid JSON"},
		{name: "deep recursive filter", args: `{` + valid + `,"filter":` + strings.Repeat(`{"op":"and","all":[`, 2000) + `{"op":"xor"}` + strings.Repeat("]}", 2000) + `}`, wantPath: "$.filter.all[0].all[0]", wantPathEnd: ".all[0].op", wantRule: "enum"},
		{name: "huge unknown key", args: `{` + valid + `,"` + huge + `":1}`, wantPath: "$", wantRule: "additionalProperties", wantText: "KKK…"},
		{name: "huge key of a map", args: `{` + valid + `,"options":{"` + huge + `":"yes"}}`, wantPath: "$.options." + strings.Repeat("K", 64) + "…", wantRule: "type"},
		{name: "huge value against a pattern", args: `{"customer":{"email":"a@b.c","name":"x","country":"` + huge + `"},"items":[{"sku":"ABC-1234","qty":1}]}`, wantPath: "$.customer.country", wantRule: "pattern", wantText: "…"},
		{name: "huge string over maxLength", args: `{` + valid + `,"notes":"` + huge + `"}`, wantPath: "$.notes", wantRule: "maxLength", wantText: "2,000"},
		{name: "wrong type in a nested array", args: `{"customer":{"email":"a@b.c","name":"x"},"items":[{"sku":"ABC-1234","qty":"1"}]}`, wantPath: "$.items[0].qty", wantRule: "type", wantText: "want integer"},
		{name: "fraction for an integer", args: `{"customer":{"email":"a@b.c","name":"x"},"items":[{"sku":"ABC-1234","qty":1.5}]}`, wantPath: "$.items[0].qty", wantRule: "type"},
		{name: "object for an array", args: `{"customer":{"email":"a@b.c","name":"x"},"items":{"0":{}}}`, wantPath: "$.items", wantRule: "type", wantText: "want array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := schema.Validate([]byte(tt.args))
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var ae *windlass.ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("Validate = %v, want *ArgumentError", err)
			}
			pathOK := ae.Path == tt.wantPath
			if tt.wantPathEnd != "" {
				pathOK = strings.HasPrefix(ae.Path, tt.wantPath) && strings.HasSuffix(ae.Path, tt.wantPathEnd) && strings.Contains(ae.Path, "…")
			}
			if !pathOK || ae.Rule != tt.wantRule || !strings.Contains(ae.Message, tt.wantText) {
				t.Errorf("Validate = path %.100q rule %q message %.200q; want path %.100q rule %q message containing %q", ae.Path, ae.Rule, ae.Message, tt.wantPath, tt.wantRule, tt.wantText)
			}
			if len(ae.Error()) > 3*maxQuoted {
				t.Errorf("the error quotes %d bytes of the arguments", len(ae.Error()))
			}
		})
	}
}

// nested returns n levels of JSON arrays, [[[…]]].
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestArgumentsOfTooManyValues: arguments of more than DefaultMaxArgumentValues
// JSON values are refused (rule "values") before anything decodes them —
// a 16 MiB array of zeros, against a schema that makes the library decode
// it, used to grow the heap by about 600 MiB on its way to a refusal; now
// it is refused with a handful of allocations. Exactly the bound passes.
func TestArgumentsOfTooManyValues(t *testing.T) {
	xs := map[string]any{"xs": map[string]any{"type": "array", "items": map[string]any{"type": "integer"}}}
	zeros := func(n int) []byte { // an object and its array: n+2 values
		return []byte(`{"xs":[` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}`)
	}
	huge := zeros(8<<20 - 4) // 16 MiB
	for _, tt := range []struct {
		name   string
		params map[string]any
	}{
		{"quick check", map[string]any{"type": "object", "properties": xs}},
		// not: a keyword the quick check does not know, so every call is
		// decoded for the library.
		{"decoded", map[string]any{"type": "object", "properties": xs, "not": map[string]any{"required": []any{"forbidden"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			schema, err := windlass.CompileArguments(windlass.Spec{Name: "sum", Parameters: tt.params})
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(zeros(windlass.DefaultMaxArgumentValues - 2)); err != nil {
				t.Fatalf("%d values: %v, want valid", windlass.DefaultMaxArgumentValues, err)
			}
			err = schema.Validate(zeros(windlass.DefaultMaxArgumentValues - 1))
			var ae *windlass.ArgumentError
			if !errors.As(err, &ae) || ae.Path != "$" || ae.Rule != "values" || !strings.Contains(ae.Message, "more than 100,000 JSON values") {
				t.Fatalf("%d values: %v, want rule values at $", windlass.DefaultMaxArgumentValues+1, err)
			}
			allocs := testing.AllocsPerRun(3, func() {
				if err := schema.Validate(huge); !errors.As(err, &ae) || ae.Rule != "values" {
					t.Fatalf("16 MiB of zeros: %v, want rule values", err)
				}
			})
			if allocs > 20 {
				t.Errorf("refusing 16 MiB of zeros took %v allocations: the arguments were decoded", allocs)
			}
		})
	}
}

// TestMaxArgumentValuesIsTheTools: a tool that takes large arrays raises
// its bound (WithMaxArgumentValues): 150,000 numbers are its arguments,
// refused by a tool of the default bound; invalid JSON of more values is
// refused as invalid JSON, not counted; a negative bound is no spec.
func TestMaxArgumentValuesIsTheTools(t *testing.T) {
	sum := func(_ context.Context, in struct{ Xs []float64 }) (int, error) { return len(in.Xs), nil }
	args := json.RawMessage(`{"Xs":[` + strings.TrimSuffix(strings.Repeat("0.5,", 150_000), ",") + `]}`)
	if r := windlass.Invoke(t.Context(), windlass.MustFunc("sum", sum, windlass.WithMaxArgumentValues(200_000)), windlass.ToolCall{ID: "c1", Arguments: args}); r.IsError || r.Content != "150000" {
		t.Errorf("150,000 values, bound 200,000: %s %q; want 150000", r.Code(), r.Content)
	}
	r := windlass.Invoke(t.Context(), windlass.MustFunc("sum", sum), windlass.ToolCall{ID: "c2", Arguments: args})
	if r.Code() != windlass.CodeInvalidArguments || !strings.Contains(r.Content, "more than 100,000 JSON values") {
		t.Errorf("150,000 values, default bound: %s %q; want invalid_arguments, rule values", r.Code(), r.Content)
	}
	schema, err := windlass.CompileArguments(windlass.Spec{Name: "sum", MaxArgumentValues: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ae *windlass.ArgumentError
	if err := schema.Validate([]byte(`{"xs":[1,2,3,4,5,6,7,8,9,10,11,]}`)); !errors.As(err, &ae) || ae.Rule != "json" {
		t.Errorf("invalid JSON of 12 value-starts, bound 10: %v; want rule json", err)
	}
	if err := (windlass.Spec{Name: "sum", MaxArgumentValues: -1}).Validate(); !errors.Is(err, windlass.ErrInvalidSpec) || !strings.Contains(err.Error(), "max_argument_values") {
		t.Errorf("a negative bound: %v; want ErrInvalidSpec naming max_argument_values", err)
	}
}
