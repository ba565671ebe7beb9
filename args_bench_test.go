package windlass

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// benchOrder are the arguments of BenchmarkValidate's tool: a FuncTool
// schema of plain fields, as most tools have.
type benchOrder struct {
	Customer string      `json:"customer" jsonschema:"description=Who orders"`
	Shipping string      `json:"shipping,omitempty" jsonschema:"enum=ground,enum=air"`
	Express  bool        `json:"express,omitempty"`
	Lines    []benchLine `json:"lines" jsonschema:"minItems=1"`
	Notes    string      `json:"notes,omitempty" jsonschema:"maxLength=10000"`
}

type benchLine struct {
	SKU   string   `json:"sku"`
	Qty   int      `json:"qty" jsonschema:"minimum=1,maximum=1000"`
	Price float64  `json:"price,omitempty" jsonschema:"minimum=0"`
	Tags  []string `json:"tags,omitempty"`
}

// benchArguments are typical valid arguments of benchOrder: a small
// object, 8 KiB of order lines (many small values) and 8 KiB that is
// mostly one string (the shape of the bench tools' arguments).
func benchArguments() []struct {
	name string
	args json.RawMessage
} {
	line := func(i int) string {
		return fmt.Sprintf(`{"sku":"SKU-%04d","qty":%d,"price":%d.25,"tags":["red","xl"]}`, i, i%9+1, i%50)
	}
	var lines []string
	for i := 0; ; i++ {
		l := line(i)
		if n := len(`{"customer":"Ada Lovelace","shipping":"air","lines":[]}`) + len(strings.Join(append(lines, l), ",")); n > 8192 {
			break
		}
		lines = append(lines, l)
	}
	return []struct {
		name string
		args json.RawMessage
	}{
		{"small", json.RawMessage(`{"customer":"Ada Lovelace","shipping":"air","express":true,"lines":[` + line(1) + `]}`)},
		{"8KiB-lines", json.RawMessage(`{"customer":"Ada Lovelace","shipping":"air","lines":[` + strings.Join(lines, ",") + `]}`)},
		{"8KiB-string", json.RawMessage(`{"customer":"Ada Lovelace","lines":[` + line(1) + `],"notes":"` + strings.Repeat("x", 8192-len(`{"customer":"Ada Lovelace","lines":[],"notes":""}`)-len(line(1))) + `"}`)},
	}
}

// BenchmarkValidate compares, in one run, the validation of typical
// valid arguments with and without the fast path:
//
//   - fast: [ArgumentsSchema.Validate] as it is, the quick check first;
//   - no-quick: without the quick check, the fast decoder then the library;
//   - library: neither, the standard decoder then the library, as
//     Validate would be without the fast path.
//
// Run it with
//
//	go test -run '^$' -bench Validate -benchmem -count 5 .
func BenchmarkValidate(b *testing.B) {
	tool := MustFunc("order", func(_ context.Context, o benchOrder) (int, error) { return len(o.Lines), nil })
	a, err := CompileArguments(tool.Spec())
	if err != nil {
		b.Fatal(err)
	}
	if a.quick == nil {
		b.Fatal("no quick check for the FuncTool schema")
	}
	noQuick := *a
	noQuick.quick = nil
	library := func(args json.RawMessage) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		if err != nil {
			return err
		}
		return a.validateValue(v)
	}
	for _, c := range benchArguments() {
		for _, v := range []struct {
			name     string
			validate func(json.RawMessage) error
		}{
			{"fast", a.Validate},
			{"no-quick", noQuick.Validate},
			{"library", library},
		} {
			if err := v.validate(c.args); err != nil {
				b.Fatalf("%s %s: %v", c.name, v.name, err)
			}
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(c.args)))
				for b.Loop() {
					if err := v.validate(c.args); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
