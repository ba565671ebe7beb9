package windlass

import (
	"context"
	"encoding/json"
	"testing"
)

// TestFuncToolSchemasGetAQuickCheck: every FuncTool schema of plain
// fields gets argcheck's quick check, so that its valid arguments are
// seen valid without decoding.
func TestFuncToolSchemasGetAQuickCheck(t *testing.T) {
	type args struct {
		City  string   `json:"city" jsonschema:"description=The city"`
		Days  int      `json:"days,omitempty" jsonschema:"minimum=1,maximum=14"`
		Units string   `json:"units,omitempty" jsonschema:"enum=metric|imperial"`
		Tags  []string `json:"tags,omitempty"`
		Exact bool     `json:"exact,omitempty"`
	}
	tool := MustFunc("forecast", func(_ context.Context, a args) (string, error) { return a.City, nil })
	raw, err := json.Marshal(tool.Spec().WithDefaults().Parameters)
	if err != nil {
		t.Fatal(err)
	}
	s, err := CompileArguments(tool.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if s.quick == nil {
		t.Fatalf("no quick check for the FuncTool schema %s", raw)
	}
	if args := `{"city":"Paris","days":3,"tags":["a"],"exact":true}`; !surelyValid(s, args) {
		t.Errorf("the quick check does not accept %s for %s", args, raw)
	}
}

// surelyValid is the quick check's verdict on args.
func surelyValid(s *ArgumentsSchema, args string) bool {
	valid, _ := s.quick.SurelyValid([]byte(args))
	return valid
}
