package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestACallsURLReachesItForEveryValidID: "." and ".." are valid call ids
// (printable ASCII), and POST accepts them, but a path segment "." or
// ".." is a dot-segment, which the mux cleans and redirects (307 to
// /v1/calls and /v1): the call's "url" and Location must escape it
// (%2E) so that GET, DELETE and events at the URL the API hands out
// reach the call.
func TestACallsURLReachesItForEveryValidID(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	for _, id := range []string{".", ".."} {
		r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true,"id":"`+id+`"}`)
		c := f.call(r, http.StatusAccepted)
		if got := f.do("GET", c.URL, ""); got.status != http.StatusOK || f.call(got, http.StatusOK).ID != id {
			t.Errorf("id %q: GET %s (its url) = %s; want 200 with the call", id, c.URL, got)
		}
		if got := f.do("DELETE", r.header.Get("Location"), ""); got.status != http.StatusOK || f.call(got, http.StatusOK).ID != id {
			t.Errorf("id %q: DELETE %s (its Location) = %s; want 200 canceled", id, r.header.Get("Location"), got)
		}
		// Canceled, the call's event stream ends at once with its result.
		if got := f.do("GET", c.URL+"/events", ""); got.status != http.StatusOK || !strings.Contains(string(got.body), "event: finished") {
			t.Errorf("id %q: GET %s/events = %s; want its events, to finished", id, c.URL, got)
		}
		f.do("DELETE", "/v1/calls/"+strings.ReplaceAll(id, ".", "%2E"), "") // stop the worker's call, should the URL miss it
	}
}
