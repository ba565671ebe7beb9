package httpapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestBodiesAreDecodedStrictly: a body that encoding/json read one way
// among several (a case variant of a name matched, the last of a name
// given twice taken, invalid UTF-8 replaced by U+FFFD) is refused 400
// invalid_call naming the field and the rule, in the call's fields and in
// its arguments alike, and none of it is queued or run: what a proxy or an
// auditor reads in a body is what the fleet does.
func TestBodiesAreDecodedStrictly(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	cases := []struct {
		name, body, mention string
		ids                 []string // the call ids the body names: none may be queued
	}{
		{"CaseVariantWins", `{"tool":"add","Tool":"count","id":"strict-case"}`,
			`unknown field "Tool" (field names are case-sensitive: did you mean "tool"?)`, []string{"strict-case"}},
		{"CaseVariantAlone", `{"TOOL":"count","id":"strict-case-alone"}`, `unknown field "TOOL"`, []string{"strict-case-alone"}},
		{"CaseVariantOfArguments", `{"tool":"fail","id":"strict-case-args","Arguments":{"why":"x"}}`, `unknown field "Arguments"`, []string{"strict-case-args"}},
		{"DuplicateTool", `{"tool":"add","tool":"count","id":"strict-dup"}`, `duplicate field "tool"`, []string{"strict-dup"}},
		{"DuplicateID", `{"tool":"count","id":"strict-dup-id-1","id":"strict-dup-id-2"}`, `duplicate field "id"`, []string{"strict-dup-id-1", "strict-dup-id-2"}},
		{"DuplicateInMetadata", `{"tool":"count","id":"strict-dup-meta","metadata":{"requester":"a","requester":"b"}}`,
			`duplicate field "metadata/requester"`, []string{"strict-dup-meta"}},
		{"DuplicateInArguments", `{"tool":"fail","id":"strict-dup-args","arguments":{"why":"shown","why":"run"}}`,
			`duplicate field "arguments/why"`, []string{"strict-dup-args"}},
		{"InvalidUTF8InAValue", "{\"tool\":\"count\",\"id\":\"strict-utf8\",\"metadata\":{\"requester\":\"a\xffb\"}}",
			`invalid UTF-8 in field "metadata/requester"`, []string{"strict-utf8"}},
		{"InvalidUTF8InAName", "{\"tool\":\"count\",\"id\":\"strict-utf8-name\",\"metadata\":{\"reque\xffster\":\"a\"}}",
			`invalid UTF-8 in field "metadata"`, []string{"strict-utf8-name"}},
		{"InvalidUTF8InArguments", "{\"tool\":\"fail\",\"id\":\"strict-utf8-args\",\"arguments\":{\"why\":\"a\xc0\xafb\"}}",
			`invalid UTF-8 in field "arguments/why"`, []string{"strict-utf8-args"}},
		{"LoneSurrogateInArguments", `{"tool":"fail","id":"strict-surrogate","arguments":{"why":"\ud800"}}`,
			`invalid JSON in field "arguments/why": invalid surrogate pair`, []string{"strict-surrogate"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do("POST", "/v1/calls", tc.body)
			var body httpapi.ErrorBody
			if r.status == http.StatusBadRequest {
				r.decode(t, &body)
			}
			msg := body.Error.Message
			if r.status != http.StatusBadRequest || body.Error.Code != windlass.CodeInvalidCall || !strings.HasPrefix(msg, "request body: "+tc.mention) {
				t.Errorf("got %s; want 400 invalid_call: request body: %s", r, tc.mention)
			}
			if strings.Contains(msg, "json:") || strings.Contains(msg, "jsontext:") {
				t.Errorf("message %q carries the decoder's prefix", msg)
			}
			for _, id := range tc.ids {
				if got := f.do("GET", "/v1/calls/"+id, ""); got.status != http.StatusNotFound || got.errorCode() != httpapi.CodeUnknownCall {
					t.Errorf("GET the refused call %s = %s, want 404 unknown_call: it was not queued", id, got)
				}
			}
		})
	}
	// Nothing ran: count's first execution is the next call's.
	c := f.call(f.do("POST", "/v1/calls", `{"tool":"count","id":"strict-after"}`), http.StatusOK)
	if c.Result == nil || c.Result.Content != "1" || f.runs.Load() != 1 {
		t.Errorf("count after the refused bodies = %+v, %d executions; want its first", c.Result, f.runs.Load())
	}
}

// TestABodyOfTooManyValuesIsNotRead: a body of more JSON values than any
// tool of the fleet takes (100,000 by default, with room for the rest of
// the request) is refused 422 invalid_arguments before it is decoded —
// checking its names for duplicates would keep each of them — and nothing
// is queued. One within that bound is read, and its arguments refused by
// the tool's own bound.
func TestABodyOfTooManyValuesIsNotRead(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	body := func(id string, n int) string {
		return `{"tool":"count","id":"` + id + `","metadata":{"n":"` + strconv.Itoa(n) + `"},"arguments":{"xs":[` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}}`
	}
	r := f.do("POST", "/v1/calls", body("many-values", 120_000))
	if r.status != http.StatusUnprocessableEntity || r.errorCode() != windlass.CodeInvalidArguments || !strings.Contains(r.String(), "more than 110,000 JSON values") {
		t.Errorf("POST of 120,000 values = %s; want 422 invalid_arguments naming the bound", r)
	}
	if got := f.do("GET", "/v1/calls/many-values", ""); got.status != http.StatusNotFound {
		t.Errorf("GET the refused call = %s, want 404: it was not queued", got)
	}
	// Within the body's bound, past the tool's: read, and refused by the
	// tool's bound on its arguments.
	if r := f.do("POST", "/v1/calls", body("some-values", 100_500)); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.String(), `arguments hold more than 100,000 JSON values`) {
		t.Errorf("POST of 100,500 values = %s; want 422, the tool's bound", r)
	}
}
