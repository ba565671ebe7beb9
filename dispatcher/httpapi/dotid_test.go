package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestDotIDsAreRefused: "." and ".." are not call ids. As the last
// segment of a call's URL they are dot-segments, which the mux cleans and
// redirects (to /v1/calls and /v1) and URL parsers that follow the WHATWG
// standard (browsers, fetch) resolve away even escaped (%2E): GET, DELETE
// and the events at the URL the API handed out would not reach the call
// (found by two review helpers). A POST with such an id is refused,
// naming the id and the rule.
func TestDotIDsAreRefused(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	for _, id := range []string{".", ".."} {
		r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true,"id":"`+id+`"}`)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), string(windlass.CodeInvalidCall)) || !strings.Contains(string(r.body), "dot-segment") {
			t.Errorf("POST with id %q = %s; want 400 invalid_call naming the rule", id, r)
		}
	}
}
