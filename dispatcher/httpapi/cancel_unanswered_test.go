package httpapi_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestADELETEWhoseCanceledResultIsNotStoredSaysCanceling: DELETE stores
// the cancellation, then answers the call's caller by storing a canceled
// result. When that second write fails (here the results stream refuses
// writes), the call is canceled all the same — the running tool's context
// is — so the DELETE must not be answered 503 unavailable, which the
// OpenAPI document defines as "nothing was canceled": it is 202 with the
// call's URL, and Dispatcher.Cancel's error wraps
// dispatcher.ErrCanceledUnanswered.
func TestADELETEWhoseCanceledResultIsNotStoredSaysCanceling(t *testing.T) {
	f, c, long := startLong(t)
	resume := f.RefuseResults()

	r := f.do("DELETE", "/v1/calls/"+c.ID+"?reason=stop", "")
	if cause := long.Canceled(t); !errors.Is(cause, windlass.ErrCallCanceled) {
		t.Errorf("the tool's context ended with %v; want windlass.ErrCallCanceled", cause)
	}
	got := f.call(r, http.StatusAccepted)
	if got.ID != c.ID || got.URL != c.URL || r.header.Get("Location") != c.URL {
		t.Errorf("DELETE = %s, Location %q; want 202 with call %q at %s", r, r.header.Get("Location"), c.ID, c.URL)
	}
	matchesSchema(t, r, "Call")

	// Canceling again finds it canceled, its answer still not stored.
	if err := f.d.Cancel(t.Context(), c.ID, "stop"); !errors.Is(err, dispatcher.ErrCanceledUnanswered) {
		t.Errorf("Cancel again = %v; want dispatcher.ErrCanceledUnanswered", err)
	}
	// The stream takes writes again: the worker's answer is stored, the
	// call's result is canceled, as the 202 said it would be.
	resume()
	st := f.pollUntil(c.ID, "the call's result", func(c httpapi.Call) bool { return c.State == dispatcher.StateFinished })
	if st.Result.Code() != windlass.CodeCanceled {
		t.Errorf("the call's result is %+v; want canceled", st.Result)
	}
}

// startLong starts a fleet whose tool "long" runs until its context ends,
// with the API over a dispatcher on its own connection (opts, such as a
// dialer that drops acknowledgements), submits a call of it and waits
// until it runs.
func startLong(t *testing.T, opts ...nats.Option) (f *fleet, c httpapi.Call, long *fleettest.UntilCanceled) {
	ff := fleettest.New(t)
	long = fleettest.NewUntilCanceled("long")
	ff.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, long)
	nc := ff.NATS.Connect(t, opts...)
	d := ff.Dispatcher(dispatcher.Config{Conn: nc})
	fleettest.WaitCatalog(t, d, "long")
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f = &fleet{Fleet: ff, t: t, d: d, h: h, srv: srv}
	c = f.call(f.do("POST", "/v1/calls", `{"tool":"long","async":true,"timeout_ms":60000}`), http.StatusAccepted)
	long.Started(t)
	return f, c, long
}
