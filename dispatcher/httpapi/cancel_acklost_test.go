package httpapi_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
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
	dropper := &fleettest.AckDropper{Stream: layout.CancelsStream}
	f, c, long := startLong(t, nats.SetCustomDialer(dropper))
	dropper.Arm()
	r := f.do("DELETE", "/v1/calls/"+c.ID+"?reason=stop", "")
	if !dropper.Dropped() {
		t.Fatal("no acknowledgement was dropped")
	}
	cause := long.Canceled(t)
	t.Logf("the tool's context ended: %v", cause)
	if !errors.Is(cause, windlass.ErrCallCanceled) {
		t.Errorf("the tool's context ended with %v; want windlass.ErrCallCanceled", cause)
	}
	t.Logf("DELETE = %s", r)
	if r.status == http.StatusServiceUnavailable {
		t.Errorf("DELETE = %s: 503, 'nothing was canceled' per the OpenAPI document, for a call whose cancellation was stored and that the worker canceled", r)
	}
}
