package windlass_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

type address struct {
	City string `json:"city" jsonschema:"description=City name"`
	Zip  string `json:"zip,omitempty"`
}

type bookingArgs struct {
	Guest    string    `json:"guest" jsonschema_description:"Full name of the guest"`
	Nights   int       `json:"nights" jsonschema:"minimum=1,default=1"`
	Room     string    `json:"room,omitempty" jsonschema:"enum=single,enum=double"`
	Address  address   `json:"address"`
	Previous []address `json:"previous,omitempty"`
	Arrive   time.Time `json:"arrive,omitzero"`
	internal int       // unexported: not part of the schema
}

func TestFuncSchemaFromStruct(t *testing.T) {
	t.Parallel()
	tool, err := windlass.Func("book", func(ctx context.Context, in bookingArgs) (string, error) {
		return fmt.Sprint(in.Guest, in.internal), nil
	},
		windlass.WithDoc("\n  Book a room.\n\n  Longer text the model does not need.\n"), windlass.WithTimeout(5*time.Second), windlass.WithApproval())
	if err != nil {
		t.Fatal(err)
	}
	spec := tool.Spec()
	if spec.Description != "Book a room." || spec.Timeout != 5*time.Second || !spec.RequiresApproval {
		t.Errorf("spec = %+v", spec)
	}
	s := mustJSON(t, spec.Parameters)
	for _, banned := range []string{`"$ref"`, `"$defs"`, `"$schema"`, `"$id"`, `"definitions"`} {
		if strings.Contains(s, banned) {
			t.Errorf("schema contains %s: %s", banned, s)
		}
	}
	const want = `{"additionalProperties":false,"properties":{"address":{"additionalProperties":false,"properties":{"city":{"description":"City name","type":"string"},"zip":{"type":"string"}},"required":["city"],"type":"object"},"arrive":{"format":"date-time","type":"string"},"guest":{"description":"Full name of the guest","type":"string"},"nights":{"default":1,"minimum":1,"type":"integer"},"previous":{"items":{"additionalProperties":false,"properties":{"city":{"description":"City name","type":"string"},"zip":{"type":"string"}},"required":["city"],"type":"object"},"type":"array"},"room":{"enum":["single","double"],"type":"string"}},"required":["guest","nights","address"],"type":"object"}`
	if s != want {
		t.Errorf("schema =\n%s\nwant\n%s", s, want)
	}
}

type node struct {
	Name     string  `json:"name"`
	Children []*node `json:"children,omitempty"`
}

func TestFuncRefusesBadInputTypes(t *testing.T) {
	t.Parallel()
	_, err := windlass.Func("tree", func(ctx context.Context, in node) (int, error) { return 0, nil })
	if err == nil || !errors.Is(err, windlass.ErrInvalidSpec) || !strings.Contains(err.Error(), "recursive") {
		t.Errorf("recursive input: err = %v", err)
	}
	_, err = windlass.Func("num", func(ctx context.Context, in int) (int, error) { return in, nil })
	if err == nil || !strings.Contains(err.Error(), "must be a struct") {
		t.Errorf("int input: err = %v", err)
	}
	_, err = windlass.Func("bad name", func(ctx context.Context, in struct{}) (int, error) { return 0, nil })
	if !errors.Is(err, windlass.ErrInvalidSpec) {
		t.Errorf("bad name: err = %v", err)
	}
}

func TestFuncNoArguments(t *testing.T) {
	t.Parallel()
	tool := windlass.MustFunc("ping", func(ctx context.Context, _ struct{}) (string, error) { return "pong", nil })
	if s := mustJSON(t, tool.Spec().Parameters); s != `{"additionalProperties":false,"properties":{},"type":"object"}` {
		t.Errorf("schema = %s", s)
	}
	for _, args := range []any{nil, json.RawMessage(`null`), json.RawMessage(``), map[string]any{}} {
		res, err := windlass.Run(t.Context(), tool, args)
		if err != nil || res.Content != "pong" {
			t.Errorf("Run(%v) = %+v, %v", args, res, err)
		}
	}
}

func TestNewToolValidatesArguments(t *testing.T) {
	t.Parallel()
	calls := 0
	tool, err := windlass.NewTool(weatherSpec(), func(ctx context.Context, args json.RawMessage) (any, error) {
		calls++
		return map[string]any{"temp": 21}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res := windlass.Invoke(t.Context(), tool, windlass.ToolCall{ID: "c1", Arguments: []byte(`{"units":"k"}`)})
	if !res.IsError || res.Code() != windlass.CodeInvalidArguments || calls != 0 {
		t.Fatalf("invalid call: %+v (calls %d)", res, calls)
	}
	res = windlass.Invoke(t.Context(), tool, windlass.ToolCall{ID: "c2", Arguments: []byte(`{"city":"Oslo"}`)})
	if res.IsError || res.Content != `{"temp":21}` || calls != 1 {
		t.Fatalf("valid call: %+v (calls %d)", res, calls)
	}
	if _, err := windlass.NewTool(windlass.Spec{Name: "x", Parameters: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "nonsense"}}}}, func(context.Context, json.RawMessage) (any, error) { return nil, nil }); !errors.Is(err, windlass.ErrInvalidSpec) {
		t.Errorf("invalid schema: err = %v", err)
	}
}

// shout is a string its JSON decoding upper-cases: a type with its own
// UnmarshalJSON, as tools' inputs have.
type shout string

func (s *shout) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = shout(strings.ToUpper(v))
	return nil
}

type decodeArgs struct {
	address                  // embedded: its fields promoted
	Name    shout            `json:"name"`
	Count   *int             `json:"count,omitempty"`
	Small   int8             `json:"small,omitempty"`
	Tags    []string         `json:"tags,omitempty"`
	Extra   map[string]any   `json:"extra,omitempty"`
	Raw     json.RawMessage  `json:"raw,omitempty"`
	When    time.Time        `json:"when,omitzero"`
	Quoted  int              `json:"quoted,string,omitempty"`
	Any     any              `json:"any,omitempty"`
	Nested  map[string][]int `json:"nested,omitempty"`
}

// TestFuncDecodesArgumentsAsEncodingJSON holds a Func tool's decoding of its
// arguments (wirejson's decoder since it was measured faster) to
// encoding/json's: the same input value for the same arguments (promoted
// fields, pointers, maps, raw JSON, times, the string option, a type's own
// UnmarshalJSON), and the same error, naming the field, for a number its
// field cannot hold.
func TestFuncDecodesArgumentsAsEncodingJSON(t *testing.T) {
	tool, err := windlass.Func("decode", func(_ context.Context, in decodeArgs) (decodeArgs, error) { return in, nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{
		`{"city":"Oslo","zip":"0150","name":"ada","count":3,"tags":["a","b"],"extra":{"n":1.5,"s":"x","l":[1,null,true]},"raw":{"k": [1, 2]},"when":"2026-12-06T04:00:00.5+01:00","quoted":"42","any":{"deep":[{"x":1}]},"nested":{"a":[1,2]}}`,
		`{"city":"Bergen","name":"grace","tags":[]}`,
		`{"city":"x","name":"é\ud83d\ude00","any":12345678901234567890}`,
		`{"city":"x","name":"y","small":-128}`,
	} {
		got, err := tool.Call(context.Background(), json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		var want decodeArgs
		if err := json.Unmarshal([]byte(args), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", args, got, want)
		}
	}
	_, err = tool.Call(context.Background(), json.RawMessage(`{"city":"x","name":"y","small":300}`))
	var ae *windlass.ArgumentError
	wantErr := json.Unmarshal([]byte(`{"small":300}`), new(decodeArgs))
	if !errors.As(err, &ae) || ae.Rule != "decode" || wantErr == nil || ae.Message != wantErr.Error() {
		t.Fatalf("a number its field cannot hold: got %v, want a decode error %q", err, wantErr)
	}
}

// BenchmarkFuncCall is a Func tool's call with 128 bytes of arguments:
// validating and decoding them, and running a function that does nothing.
func BenchmarkFuncCall(b *testing.B) {
	type in struct {
		Data string `json:"data,omitempty"`
	}
	tool, err := windlass.Func("bench", func(_ context.Context, in in) (int, error) { return len(in.Data), nil })
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"data":"` + strings.Repeat("x", 128) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tool.Call(context.Background(), args); err != nil {
			b.Fatal(err)
		}
	}
}
