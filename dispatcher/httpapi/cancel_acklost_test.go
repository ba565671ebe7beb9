package httpapi_test

import (
	"context"
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
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestADELETEWhoseCancellationWasStoredUnacknowledgedIsNotNothingCanceled:
// the sibling of fe3f562's case. DELETE's first write, the cancellation
// itself, is stored, but its acknowledgement is lost (a reply lost in a
// NATS restart or a leader change; fleettest.AckDropper). At 19508af
// Cancel returned a plain error, answered 503 unavailable — "nothing was
// canceled", per the OpenAPI document — while the worker canceled the
// running call. The cancellation is sent again (one, by its message id)
// until acknowledged. (Found by a review helper.)
func TestADELETEWhoseCancellationWasStoredUnacknowledgedIsNotNothingCanceled(t *testing.T) {
	ff := fleettest.New(t)
	started, canceled := make(chan struct{}, 1), make(chan error, 1)
	ff.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, windlass.MustFunc("long", func(ctx context.Context, _ struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		canceled <- context.Cause(ctx)
		return "", context.Cause(ctx)
	}))
	dropper := &fleettest.AckDropper{Stream: layout.CancelsStream}
	nc := ff.NATS.Connect(t, nats.SetCustomDialer(dropper))
	d := ff.Dispatcher(dispatcher.Config{Conn: nc})
	fleettest.WaitCatalog(t, d, "long")
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fleet{Fleet: ff, t: t, d: d, h: h, srv: srv}

	c := f.call(f.do("POST", "/v1/calls", `{"tool":"long","async":true,"timeout_ms":60000}`), http.StatusAccepted)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not start")
	}
	dropper.Arm()
	r := f.do("DELETE", "/v1/calls/"+c.ID+"?reason=stop", "")
	if !dropper.Dropped() {
		t.Fatal("no acknowledgement was dropped")
	}
	select {
	case cause := <-canceled:
		t.Logf("the tool's context ended: %v", cause)
		if !errors.Is(cause, windlass.ErrCallCanceled) {
			t.Errorf("the tool's context ended with %v; want windlass.ErrCallCanceled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tool's context was not canceled")
	}
	t.Logf("DELETE = %s", r)
	if r.status == http.StatusServiceUnavailable {
		t.Errorf("DELETE = %s: 503, 'nothing was canceled' per the OpenAPI document, for a call whose cancellation was stored and that the worker canceled", r)
	}
}
