package approval_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
)

// TestAnsweredHeldCallFreesItsSlot: a gated call holds its key's
// admission slot while it waits for people; when the approval service
// answers it (here rejected), the slot is free at once, although the
// dispatcher that admitted the call is gone (a CLI that submitted it and
// exited): another dispatcher admits the key's next call.
func TestAnsweredHeldCallFreesItsSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	cfg := dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: 1}}}
	a, b := f.Dispatcher(cfg), f.Dispatcher(cfg)
	fleettest.WaitCatalog(t, a, "pay")
	fleettest.WaitCatalog(t, b, "pay")
	// Its slot would lapse 11 minutes from now, long after the bound below.
	id, err := a.Submit(t.Context(), "pay", payArgs{To: "mallory", Amount: 9}, dispatcher.WithKey("tenant"), dispatcher.WithTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.held(id)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = b.Submit(t.Context(), "pay", payArgs{To: "bob", Amount: 1}, dispatcher.WithKey("tenant"))
	if ce := (*windlass.CallError)(nil); !errors.As(err, &ce) || ce.Code != windlass.CodeRateLimited {
		t.Fatalf("a second call of the key while the first is held = %v; want rate_limited", err)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": "no"}); code != http.StatusOK {
		t.Fatalf("reject = %d %v", code, body)
	}
	if r := f.wait(id); r.Code() != windlass.CodeRejected {
		t.Fatalf("result = %+v; want rejected", r)
	}
	fleettest.WaitFor(t, 20*time.Second, "the key's next call admitted by another dispatcher", func() bool {
		_, err := b.Submit(t.Context(), "pay", payArgs{To: "bob", Amount: 1}, dispatcher.WithKey("tenant"))
		return err == nil
	})
}
