package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestAPOSTOfAGeneratedIDWithOtherArgumentsConflicts: a client POSTs a
// call without an id and is answered with the one the API generated; it
// then POSTs that id as its own with other arguments. One id is one call:
// 409 id_conflict, never 200 with the first call's result as if it were
// the answer to the second. (Found by a review helper.)
func TestAPOSTOfAGeneratedIDWithOtherArgumentsConflicts(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	first := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2}}`), http.StatusOK)
	if first.Result == nil || first.Result.Content != "3" {
		t.Fatalf("first call = %+v", first)
	}
	r := f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":40,"b":2},"id":"`+first.ID+`"}`)
	if r.status != http.StatusConflict {
		var c httpapi.Call
		r.decode(t, &c)
		if c.State == dispatcher.StateFinished && c.Result != nil {
			t.Errorf("POST id %q with a+b = 40+2: %d, result content %q (the first call's 1+2); want 409 id_conflict", first.ID, r.status, c.Result.Content)
			return
		}
		t.Errorf("POST with the generated id and other arguments: %s; want 409 id_conflict", r)
	}
}
