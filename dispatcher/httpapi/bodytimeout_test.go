package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestBodyTimeoutDoesNotCutTheWait: Config.BodyTimeout bounds the time a
// request body has to arrive (TestASlowBodyIsNotHeldForever in
// cmd/windlass), by a read deadline on the connection; once the body is
// read the deadline is cleared, so a POST that waits for its result
// longer than the bound still gets it.
func TestBodyTimeoutDoesNotCutTheWait(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	f := newFleet(t, httpapi.Config{BodyTimeout: bodyTimeout})
	r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":600}}`) // six times the bound
	c := f.call(r, http.StatusOK)
	if c.State != dispatcher.StateFinished || c.Result == nil || c.Result.IsError {
		t.Fatalf("POST = %s; want the slow call's result", r)
	}
}
