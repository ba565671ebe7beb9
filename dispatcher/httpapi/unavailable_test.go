package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// TestCallUnreadableIsUnavailable stops the NATS server under an accepted
// call: GET, DELETE and the events of the call answer 503 unavailable with
// a Retry-After, never 404 unknown_call, which would tell the client its
// call was lost. While NATS is up, an id never submitted is 404.
func TestCallUnreadableIsUnavailable(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true}`), http.StatusAccepted)
	f.pollUntil(c.ID, "the call to start", func(c httpapi.Call) bool { return c.State == dispatcher.StateRunning })
	for _, path := range []string{"/v1/calls/call_never_made", "/v1/calls/call_never_made/events"} {
		if r := f.do("GET", path, ""); r.status != http.StatusNotFound || r.errorCode() != httpapi.CodeUnknownCall {
			t.Errorf("GET %s with NATS up = %s; want 404 unknown_call", path, r)
		}
	}

	f.NATS.Stop()
	cases := []struct{ method, path string }{
		{"GET", "/v1/calls/" + c.ID},
		{"DELETE", "/v1/calls/" + c.ID},
		{"GET", "/v1/calls/" + c.ID + "/events"},
	}
	for _, tc := range cases {
		r := f.do(tc.method, tc.path, "")
		if r.status != http.StatusServiceUnavailable || r.errorCode() != windlass.CodeUnavailable {
			t.Errorf("%s %s with NATS down = %s; want 503 unavailable", tc.method, tc.path, r)
		}
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s %s with NATS down: Retry-After %q; want a number of seconds", tc.method, tc.path, r.header.Get("Retry-After"))
		}
	}

	f.NATS.Restart(t)
	// The call is there again once the streams are; cancel it so the
	// worker stops before the test ends.
	fleettest.WaitFor(t, 60*time.Second, "the call to be readable after the restart", func() bool {
		return f.do("GET", "/v1/calls/"+c.ID, "").status == http.StatusOK
	})
	fleettest.WaitFor(t, 60*time.Second, "the call to be canceled", func() bool {
		r := f.do("DELETE", "/v1/calls/"+c.ID, "")
		return r.status == http.StatusOK || r.status == http.StatusConflict
	})
}
