package windlass_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/windlass-dev/windlass"
)

// The fuzz targets below decode what arrives from the network (a call, a
// result, a model's arguments) and check that bad input is refused with a
// clear error and never panics. Their seed corpora are in
// testdata/fuzz/<target>; plain `go test` runs them. To fuzz one:
//
//	go test -run '^$' -fuzz FuzzDecodeToolCall -fuzztime 60s -fuzzminimizetime 5s .
//
// The corpora hold some large inputs (100k levels of nesting, 256 KiB
// strings); -fuzzminimizetime keeps the fuzzer from spending a minute
// minimizing each new input derived from one of them.

// FuzzDecodeToolCall decodes a call message as a worker does and validates
// its envelope. A call that validates has a name that is a safe subject
// token, re-encodes, and decodes to an equal call that validates too; a
// call that does not gets an error naming the field.
func FuzzDecodeToolCall(f *testing.F) {
	f.Add([]byte(`{"id":"call_1","name":"add","arguments":{"a":1,"b":2}}`))
	f.Add([]byte(`{"id":"toolu_01A","name":"echo","arguments":null,"deadline":"2030-01-02T03:04:05.123456789+01:00","attempt":2,"spec_hash":"abc","metadata":{"requester":"ada"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var call windlass.ToolCall
		if err := json.Unmarshal(data, &call); err != nil {
			return
		}
		if err := call.Validate(); err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "id: ") && !strings.HasPrefix(msg, "name: ") &&
				!strings.Contains(msg, "arguments must be") && !strings.Contains(msg, "attempt must") {
				t.Fatalf("Validate error %q names no field", msg)
			}
			return
		}
		if strings.ContainsAny(call.Name, ".*> \t\r\n") || !utf8.ValidString(call.Name) || len(call.Name) > 64 {
			t.Fatalf("valid call with name %q, which is not a safe subject token", call.Name)
		}
		back, enc := roundTrip(t, call)
		if err := back.Validate(); err != nil {
			t.Fatalf("re-encoded call does not validate: %v\n%s", err, enc)
		}
		if !equalCalls(call, back) {
			t.Fatalf("round trip changed the call:\nbefore %+v\nafter  %+v", call, back)
		}
		if _, again := roundTrip(t, back); !bytes.Equal(again, enc) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, again)
		}
	})
}

// roundTrip encodes v and decodes the encoding, failing the test if either
// fails: whatever was decoded from the wire must go back on it.
func roundTrip[T any](t *testing.T, v T) (back T, enc []byte) {
	t.Helper()
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("a decoded %T does not encode: %v (%+v)", v, err, v)
	}
	if err := json.Unmarshal(enc, &back); err != nil {
		t.Fatalf("re-encoded %T does not decode: %v\n%s", v, err, enc)
	}
	return back, enc
}

// equalCalls compares two calls as the protocol sees them: deadlines as
// instants, no metadata as empty metadata, and arguments as JSON values.
func equalCalls(a, b windlass.ToolCall) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Attempt == b.Attempt && a.SpecHash == b.SpecHash &&
		a.Deadline.Equal(b.Deadline) && maps.Equal(a.Metadata, b.Metadata) &&
		sameJSON(a.Arguments, b.Arguments)
}

// sameJSON reports whether two raw JSON texts hold the same value, where
// empty and null both mean no value.
func sameJSON(a, b json.RawMessage) bool {
	decode := func(raw json.RawMessage) (any, bool) {
		if len(bytes.TrimSpace(raw)) == 0 {
			return nil, true
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, oka := decode(a)
	vb, okb := decode(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

// FuzzDecodeToolResult decodes a result message as a dispatcher does and
// uses it the way a caller would: its code, its data decoded and rendered.
// Decode fails for an error result and for a result without data; a decoded
// result re-encodes and decodes to an equal result.
func FuzzDecodeToolResult(f *testing.F) {
	f.Add([]byte(`{"call_id":"call_1","name":"add","content":"3","data":3,"is_error":false,"duration_ms":0.5,"worker":"w1","attempt":1}`))
	f.Add([]byte(`{"call_id":"call_2","name":"add","content":"boom","is_error":true,"error":{"code":"tool_error","message":"boom","retryable":true,"retry_after_ms":100}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r windlass.ToolResult
		if err := json.Unmarshal(data, &r); err != nil {
			return
		}
		if r.Error == nil && r.Code() != "" || r.Error != nil && r.Code() != r.Error.Code {
			t.Fatalf("Code() = %q for error %+v", r.Code(), r.Error)
		}
		var v any
		err := r.Decode(&v)
		switch {
		case r.IsError && err == nil:
			t.Fatalf("Decode of an error result succeeded: %+v", r)
		case !r.IsError && len(r.Data) == 0 && err == nil:
			t.Fatalf("Decode of a result without data succeeded: %+v", r)
		case err != nil && r.IsError && !strings.Contains(err.Error(), "is an error"):
			t.Fatalf("Decode error %q does not say the result is an error", err)
		case err == nil:
			text := windlass.Render(v)
			if _, isString := v.(string); !isString && !json.Valid([]byte(text)) {
				t.Fatalf("Render(%#v) = %q, not JSON", v, text)
			}
			if got := windlass.Render(r.Data); got != string(r.Data) {
				t.Fatalf("Render(raw data) = %q, want the data %q", got, r.Data)
			}
		}
		if back, _ := roundTrip(t, r); !equalResults(r, back) {
			t.Fatalf("round trip changed the result:\nbefore %+v\nafter  %+v", r, back)
		}
	})
}

// equalResults compares two results, their data as JSON values.
func equalResults(a, b windlass.ToolResult) bool {
	da, db := a.Data, b.Data
	a.Data, b.Data = nil, nil
	return reflect.DeepEqual(a, b) && sameJSON(da, db)
}

// orderSchema is a realistic tool schema: nested objects, arrays of
// objects, enums, patterns, formats, numeric bounds, uniqueness, a map of
// booleans and a recursive filter expression.
func orderSchema(tb testing.TB) *windlass.ArgumentsSchema {
	tb.Helper()
	s, err := windlass.CompileArguments(windlass.Spec{Name: "place_order", Parameters: map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"customer", "items"},
		"properties": map[string]any{
			"customer": map[string]any{"type": "object", "required": []string{"email", "name"}, "properties": map[string]any{
				"email":   map[string]any{"type": "string", "format": "email"},
				"name":    map[string]any{"type": "string", "minLength": 1, "maxLength": 100},
				"country": map[string]any{"type": "string", "pattern": "^[A-Z]{2}$"},
			}},
			"items": map[string]any{"type": "array", "minItems": 1, "maxItems": 50, "items": map[string]any{
				"type": "object", "required": []string{"sku", "qty"}, "properties": map[string]any{
					"sku":   map[string]any{"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
					"qty":   map[string]any{"type": "integer", "minimum": 1, "maximum": 1000},
					"price": map[string]any{"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01},
					"tags":  map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{"type": "string", "maxLength": 20}},
				},
			}},
			"shipping":      map[string]any{"type": "string", "enum": []string{"ground", "air", "pickup"}},
			"deliver_after": map[string]any{"type": "string", "format": "date-time"},
			"notes":         map[string]any{"type": []string{"string", "null"}, "maxLength": 2000},
			"options":       map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "boolean"}},
			"scores":        map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{"type": "number", "maximum": 100}},
			"filter":        map[string]any{"$ref": "#/$defs/filter"},
		},
		"$defs": map[string]any{"filter": map[string]any{
			"type": "object", "required": []string{"op"}, "properties": map[string]any{
				"op":    map[string]any{"enum": []string{"eq", "ne", "lt", "and", "or", "not"}},
				"field": map[string]any{"type": "string"},
				"value": map[string]any{},
				"all":   map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/filter"}},
			},
		}},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// maxQuoted bounds an ArgumentError's path and message: 1 KiB and an
// ellipsis, whatever the size of the arguments.
const maxQuoted = 1024 + len("…")

// FuzzValidateArguments validates arbitrary bytes as a model's arguments
// against orderSchema. Validate never panics; it accepts, or refuses with
// an *ArgumentError that locates the violation ("$…"), names the rule and
// quotes at most maxQuoted bytes of the arguments.
// Whatever it accepts, a worker accepts too: valid JSON, an object (or
// nothing), a valid call envelope.
func FuzzValidateArguments(f *testing.F) {
	schema := orderSchema(f)
	f.Add([]byte(`{"customer":{"email":"ada@example.com","name":"Ada","country":"GB"},"items":[{"sku":"ABC-1234","qty":2,"price":9.99,"tags":["a","b"]}],"shipping":"air","filter":{"op":"and","all":[{"op":"eq","field":"x","value":1}]}}`))
	f.Add([]byte(`{"customer":{"email":"ada@example.com","name":""},"items":[{"sku":"abc","qty":0}]}`))
	f.Fuzz(func(t *testing.T, args []byte) {
		err := schema.Validate(args)
		if err == nil {
			if b := bytes.TrimSpace(args); len(b) > 0 && string(b) != "null" && (b[0] != '{' || !json.Valid(b)) {
				t.Fatalf("Validate accepted %q, which is not a JSON object", args)
			}
			call := windlass.ToolCall{ID: "call_fuzz", Name: "place_order", Arguments: args}
			if err := call.Validate(); err != nil {
				t.Fatalf("arguments the schema accepts make an invalid call: %v", err)
			}
			return
		}
		var ae *windlass.ArgumentError
		if !errors.As(err, &ae) {
			t.Fatalf("Validate(%q) = %v (%T), want an *ArgumentError", args, err, err)
		}
		if !strings.HasPrefix(ae.Path, "$") || ae.Rule == "" || ae.Message == "" || ae.Tool != "place_order" {
			t.Fatalf("unclear ArgumentError %+v", ae)
		}
		if len(ae.Path) > maxQuoted || len(ae.Message) > maxQuoted || !utf8.ValidString(ae.Path) || !utf8.ValidString(ae.Message) {
			t.Fatalf("ArgumentError quotes too much or splits a character: path %d bytes, message %d bytes", len(ae.Path), len(ae.Message))
		}
		if ae.Rule == "json" && !strings.Contains(ae.Message, "arguments are not valid JSON") {
			t.Fatalf("JSON syntax error %q does not name the arguments", ae.Message)
		}
	})
}

// FuzzValidateName checks the tool name rule: whatever passes matches
// windlass.NamePattern, so it is a safe NATS subject token; whatever fails
// gets an error quoting the rule.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"add", "get_weather", "a.b", "*", ">", "a b", "café", "", strings.Repeat("x", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := windlass.ValidateName(name)
		valid := len(name) >= 1 && len(name) <= 64 && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == ""
		if (err == nil) != valid {
			t.Fatalf("ValidateName(%q) = %v, want valid %t", name, err, valid)
		}
		if err != nil && (!strings.Contains(err.Error(), windlass.NamePattern) || !errors.Is(err, windlass.ErrInvalidSpec)) {
			t.Fatalf("ValidateName(%q) = %v: does not quote the rule or wrap ErrInvalidSpec", name, err)
		}
	})
}

// FuzzValidateCallID checks the call id rule: whatever passes is 1 to
// MaxCallIDLength printable ASCII bytes without spaces, quotes or
// backslashes, so it can go in a header and a log line as it is, and is
// not a URL's dot-segment ("." or "..").
func FuzzValidateCallID(f *testing.F) {
	for _, s := range []string{"call_1", "toolu_01ABC", "a b", `a"b`, `a\b`, "ü", "", "\x00", strings.Repeat("x", 129), ".", "..", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := windlass.ValidateCallID(id)
		valid := len(id) >= 1 && len(id) <= windlass.MaxCallIDLength && id != "." && id != ".." && !strings.ContainsFunc(id, func(r rune) bool {
			return r <= ' ' || r >= 0x7f || r == '"' || r == '\\'
		})
		if (err == nil) != valid {
			t.Fatalf("ValidateCallID(%q) = %v, want valid %t", id, err, valid)
		}
		if err != nil && !strings.Contains(err.Error(), "call id") {
			t.Fatalf("ValidateCallID(%q) = %v: does not say what is wrong", id, err)
		}
	})
}
