package strictjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/strictjson"
)

// decision is the shape of the approval service's decision bodies.
type decision struct {
	ArgsHash  string          `json:"args_hash"`
	Arguments json.RawMessage `json:"arguments"`
	Reason    string          `json:"reason"`
	NoRetry   bool            `json:"no_retry"`
	Inner     *struct {
		Count uint8   `json:"count"`
		Ratio float64 `json:"ratio"`
	} `json:"inner,omitempty"`
}

// TestRefusals: what encoding/json let through (a case variant of a name,
// a name twice, invalid UTF-8) is refused, and every refusal says what and
// where in a short message without the decoder's prefixes.
func TestRefusals(t *testing.T) {
	cases := []struct{ body, want string }{
		// Names match exactly.
		{`{"tool":"add","Tool":"rm"}`, `unknown field "Tool" (field names are case-sensitive: did you mean "tool"?)`},
		{`{"TOOL":"add"}`, `unknown field "TOOL" (field names are case-sensitive: did you mean "tool"?)`},
		{`{"tool":"add","Arguments":{}}`, `unknown field "Arguments" (field names are case-sensitive: did you mean "arguments"?)`},
		{`{"tool":"add","ſtyle":"openai"}`, `unknown field "ſtyle" (field names are case-sensitive: did you mean "style"?)`}, // U+017F folds to s
		{`{"tool":"add","argumnets":{}}`, `unknown field "argumnets"`},
		// A name once.
		{`{"tool":"add","tool":"rm"}`, `duplicate field "tool"`},
		{`{"tool":"add","metadata":{"k":"a","k":"b"}}`, `duplicate field "metadata/k"`},
		{`{"tool":"add","arguments":{"a":1,"a":2}}`, `duplicate field "arguments/a"`},
		{`{"tool":"add","arguments":{"a":[{"b":1,"b":2}]}}`, `duplicate field "arguments/a/0/b"`},
		// Valid UTF-8 only, names and values, in the arguments too.
		{"{\"tool\":\"a\xffd\"}", `invalid UTF-8 in field "tool"`},
		{"{\"to\xffol\":\"add\"}", `invalid UTF-8 in a field name`},
		{"{\"tool\":\"add\",\"metadata\":{\"k\":\"v\xff\"}}", `invalid UTF-8 in field "metadata/k"`},
		{"{\"tool\":\"add\",\"metadata\":{\"k\xff\":\"v\"}}", `invalid UTF-8 in field "metadata"`},
		{"{\"tool\":\"add\",\"arguments\":{\"a\":\"\xc0\x80\"}}", `invalid UTF-8 in field "arguments/a"`},
		{`{"tool":"add","arguments":{"a":"\ud800"}}`, "invalid JSON in field \"arguments/a\": invalid surrogate pair `\\ud800\"}}` in string"},
		// As before.
		{``, `empty; want a JSON object`},
		{" \n", `empty; want a JSON object`},
		{`{"tool":"add",`, `the JSON ends early`},
		{`{"tool":"add"} {}`, `trailing data after the JSON value`},
		{`{"tool":"add"} x`, `trailing data after the JSON value`},
		{`{"tool":x}`, `invalid JSON in field "tool": invalid character 'x' at start of value`},
		{`{"tool" "add"}`, `invalid JSON in field "tool": invalid character '"' after object name (expecting ':')`},
		{`{1:2}`, `invalid JSON at byte 1: object member name must be a string`},
		{`[1]`, `want an object, got an array`},
		{`{"tool":7}`, `field "tool": want a string, got a number`},
		{`{"tool":"add","timeout_ms":1e20}`, `field "timeout_ms": want a 64-bit integer, got the number 1e20`},
		{`{"tool":"add","timeout_ms":99999999999999999999}`, `field "timeout_ms": want a 64-bit integer, got the number 99999999999999999999`},
		{`{"tool":"add","timeout_ms":"5"}`, `field "timeout_ms": want a 64-bit integer, got a string`},
		{`{"tool":"add","async":"true"}`, `field "async": want true or false, got a string`},
		{`{"tool":"add","metadata":{"k":1}}`, `field "metadata/k": want a string, got a number`},
		{`{"tool":"add","metadata":[]}`, `field "metadata": want an object, got an array`},
	}
	for _, tc := range cases {
		var req httpapi.CallRequest
		err := strictjson.Decode(strings.NewReader(tc.body), &req, 0)
		var serr *strictjson.Error
		if !errors.As(err, &serr) || err.Error() != tc.want {
			t.Errorf("%q: %v (%T)\nwant %s", tc.body, err, err, tc.want)
		}
	}
}

// TestRefusalsInOtherShapes: the messages for a decision body (the
// approval service's), a nested object and unsigned and float fields.
func TestRefusalsInOtherShapes(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"args_hash":"h","ARGS_HASH":"h2"}`, `unknown field "ARGS_HASH" (field names are case-sensitive: did you mean "args_hash"?)`},
		{`{"args_hash":"h","args_hash":"h2"}`, `duplicate field "args_hash"`},
		{"{\"reason\":\"no\xff\"}", `invalid UTF-8 in field "reason"`},
		{`{"inner":{"Count":1}}`, `unknown field "inner/Count" (field names are case-sensitive: did you mean "count"?)`},
		{`{"inner":{"count":-1}}`, `field "inner/count": want a non-negative 8-bit integer, got the number -1`},
		{`{"inner":{"ratio":true}}`, `field "inner/ratio": want a number, got a boolean`},
		{`{"no_retry":null,"inner":{"count":1,"count":2}}`, `duplicate field "inner/count"`},
	}
	for _, tc := range cases {
		var d decision
		if err := strictjson.Decode(strings.NewReader(tc.body), &d, 0); err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v\nwant %s", tc.body, err, tc.want)
		}
	}
}

// accepted are bodies both decoders take: the strict one must decode them
// as encoding/json does (arguments byte for byte, whitespace and escapes
// kept; null as encoding/json has it).
var accepted = []string{
	`{"tool":"add","arguments":{"a":1,"b":2}}`,
	`  {"arguments":  { "a" : "\u00e9\/\ud83d\ude00" , "b":[1, 2.50e1 ], "c":{}} , "tool":"x"}  ` + "\n",
	`{"tool":"add","arguments":null,"id":"c-1","timeout_ms":1500,"wait_ms":0,"metadata":{"who":"é"},"async":true,"spec_hash":"ab","style":"anthropic"}`,
	`{"tool":null,"metadata":null,"async":null,"timeout_ms":null,"arguments":"not an object"}`,
	`{"tool":"add","timeout_ms":-0,"wait_ms":-5,"arguments":[]}`,
	`{}`, `null`,
}

// oldDecode is how the API decoded a body before: encoding/json, unknown
// fields and trailing data refused.
func oldDecode(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

// timed has the fields whose JSON differs most between encoding/json and
// go-json-experiment's defaults.
type timed struct {
	D time.Duration     `json:"d"`
	T time.Time         `json:"t"`
	B []byte            `json:"b"`
	A [2]int            `json:"a"`
	M map[string]string `json:"m"`
	S int               `json:"s,string"`
}

// TestTimesAndBytesAsEncodingJSON: a duration is nanoseconds, a time RFC
// 3339 (loosely, as encoding/json reads it), bytes base64, a number with
// the string option quoted, an array of any length, as encoding/json has
// them.
func TestTimesAndBytesAsEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"d":1500000000,"t":"2026-12-05T05:00:00.123456789Z","b":"aGk=","a":[1],"m":{"k":"v"},"s":"7"}`,
		`{"d":-1,"t":"2026-12-05T05:00:00+01:00","b":null,"a":[1,2,3],"m":null,"s":"-0"}`,
	} {
		var want, got timed
		if err := oldDecode([]byte(body), &want); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", body, err)
		}
		if err := strictjson.Decode(strings.NewReader(body), &got, 0); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", body, got, err, want)
		}
	}
	for _, body := range []string{`{"d":"1s"}`, `{"t":"yesterday"}`, `{"s":7}`} {
		var want, got timed
		if oldDecode([]byte(body), &want) == nil || strictjson.Decode(strings.NewReader(body), &got, 0) == nil {
			t.Errorf("%q: taken; encoding/json refuses it, and so must Decode", body)
		}
	}
}

// TestAcceptedAsEncodingJSON: a body both take decodes alike.
func TestAcceptedAsEncodingJSON(t *testing.T) {
	for _, body := range accepted {
		var want, got httpapi.CallRequest
		if err := oldDecode([]byte(body), &want); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", body, err)
		}
		if err := strictjson.Decode(strings.NewReader(body), &got, 0); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", body, got, err, want)
		}
	}
}

// FuzzDecodeOnlyAddsStrictRules looks for a body that Decode takes and
// encoding/json does not or decodes otherwise, one that encoding/json takes
// and Decode refuses for another reason than its strict rules, and a
// message carrying the decoder's prefixes.
func FuzzDecodeOnlyAddsStrictRules(f *testing.F) {
	for _, body := range accepted {
		f.Add([]byte(body))
	}
	for _, body := range []string{`{"tool":"add","Tool":"rm"}`, `{"tool":"a","tool":"b"}`, "{\"tool\":\"a\xff\"}", `{"tool":"\ud800"}`, `{"args_hash":"h","reason":"r"}`} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, into := range []func() any{func() any { return new(httpapi.CallRequest) }, func() any { return new(decision) }, func() any { return new(timed) }} {
			want, got := into(), into()
			wantErr, gotErr := oldDecode(data, want), strictjson.Decode(strings.NewReader(string(data)), got, 0)
			switch {
			case gotErr == nil && wantErr != nil:
				t.Fatalf("%q: taken, but encoding/json refuses it: %v", data, wantErr)
			case gotErr == nil && !reflect.DeepEqual(got, want):
				t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
			case gotErr != nil && wantErr == nil && !strictRule(gotErr.Error()):
				t.Fatalf("%q: refused (%v), and not for a strict rule", data, gotErr)
			case gotErr != nil && strings.Contains(gotErr.Error(), "json: ") || gotErr != nil && strings.Contains(gotErr.Error(), "jsontext: "):
				t.Fatalf("%q: message %q has the decoder's prefix", data, gotErr)
			}
		}
	})
}

// strictRule reports whether a refusal's message is one of the rules
// encoding/json did not apply.
func strictRule(msg string) bool {
	return strings.HasPrefix(msg, "duplicate field ") || strings.HasPrefix(msg, "invalid UTF-8 in ") ||
		strings.Contains(msg, "(field names are case-sensitive") ||
		strings.Contains(msg, ": invalid surrogate pair ") || strings.Contains(msg, ": invalid escape sequence ")
}

// TestReaderErrorsComeThrough: a body over its size limit or past its
// deadline is the reader's error, as the reader gave it, wherever it
// comes: within the value or after it.
func TestReaderErrorsComeThrough(t *testing.T) {
	deadline := fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	cases := []struct {
		name string
		body io.Reader
		is   func(error) bool
	}{
		{"TooLargeWithin", http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(`{"tool":"`+strings.Repeat("x", 100)+`"}`)), 20),
			func(err error) bool { var e *http.MaxBytesError; return errors.As(err, &e) && e.Limit == 20 }},
		{"TooLargeAfter", http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(`{"tool":"add"}`+strings.Repeat(" ", 100))), 20),
			func(err error) bool { var e *http.MaxBytesError; return errors.As(err, &e) }},
		{"DeadlineWithin", io.MultiReader(strings.NewReader(`{"tool":"ad`), errReader{deadline}),
			func(err error) bool { return err == deadline }},
		{"DeadlineAfter", io.MultiReader(strings.NewReader(`{"tool":"add"}`), errReader{deadline}),
			func(err error) bool { return err == deadline }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var req httpapi.CallRequest
			err := strictjson.Decode(tc.body, &req, 0)
			var serr *strictjson.Error
			if !tc.is(err) || errors.As(err, &serr) {
				t.Errorf("Decode = %v (%T), want the reader's error", err, err)
			}
		})
	}
}

// errReader fails every read with its error.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestTooManyValuesAreNotDecoded: a body of more values than the bound is
// refused before it is decoded — a million names, which checking for
// duplicates would keep (236 MiB for this body, 11 MiB) — and one within
// it decodes.
func TestTooManyValuesAreNotDecoded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tool":"x","arguments":{`)
	for i := range 1_000_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":0`, i)
	}
	b.WriteString(`}}`)
	body := b.String()
	var req httpapi.CallRequest
	var err error
	allocs := testing.AllocsPerRun(1, func() { err = strictjson.Decode(strings.NewReader(body), &req, 100_000) })
	var tooMany *strictjson.TooManyValuesError
	if !errors.As(err, &tooMany) || tooMany.Limit != 100_000 {
		t.Fatalf("Decode of a million values, bound 100,000 = %v; want *TooManyValuesError", err)
	}
	if allocs > 100 {
		t.Errorf("refusing it took %.0f allocations: it was decoded", allocs)
	}
	if err := strictjson.Decode(strings.NewReader(`{"tool":"x","arguments":{"a":[1,2]}}`), &req, 6); err != nil || req.Tool != "x" {
		t.Errorf("Decode of 6 values, bound 6 = %+v, %v", req, err)
	}
}
