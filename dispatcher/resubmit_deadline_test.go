package dispatcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestAResubmitPastItsDeadlineIsNotToldNoWorker: prepare's look-up (under
// the caller's ctx) finds the call's record; at 2a1b4af publish looked
// again under the call's wait deadline, which could not read it — here
// because that deadline, the one the caller retries with, has passed (a
// stream that cannot be read for a second does the same) — and answered
// no_worker, "no live worker right now", for a call that ran and whose
// result is stored. A resubmit prepare recognised is not looked up again.
// (Found by a review helper.)
func TestAResubmitPastItsDeadlineIsNotToldNoWorker(t *testing.T) {
	t.Parallel()
	f, w, d, runs := chargeFleet(t)
	dl := time.Now().Add(3 * time.Second) // the caller's absolute deadline, reused on retry
	r, err := d.Call(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-dl"), dispatcher.WithDeadline(dl))
	if err != nil || r.IsError {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	fleettest.StoredResult(t, f.JetStream(), "pay-dl")
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitCatalog(t, d) // no live worker of charge
	fleettest.WaitFor(t, 10*time.Second, "the deadline to pass", func() bool { return time.Now().After(dl) })

	if id, err := d.Submit(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-dl"), dispatcher.WithDeadline(dl)); id != "pay-dl" || err != nil {
		t.Errorf("Submit again = %q, %v; want the call's id", id, err)
	}
	again, err := d.Call(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-dl"), dispatcher.WithDeadline(dl))
	if again.Code() == windlass.CodeNoWorker {
		t.Errorf("Call again = %q %q, err %v: told no_worker (not queued) for call pay-dl, which ran (result %q stored)", again.Code(), again.Content, err, r.Content)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("charge ran %d times", n)
	}
}

// TestAHeldResubmitWithNoWorkerIsTheCall: a gated call held for approval
// (no approval service decides here), its tool's worker gone: the resubmit
// is that call — Submit gets its id, Call is not told no_worker.
func TestAHeldResubmitWithNoWorkerIsTheCall(t *testing.T) {
	t.Parallel()
	priv, _, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := release.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := release.ParsePublicKey(release.NewSigner(key).PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	pay := windlass.MustFunc("pay", func(ctx context.Context, in struct {
		Cents int `json:"cents"`
	}) (string, error) {
		return "paid", nil
	}, windlass.WithApproval())
	f := fleettest.New(t)
	w := f.StartWorker(worker.Config{Releases: release.NewVerifier(pub)}, pay)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "pay")
	if id, err := d.Submit(t.Context(), "pay", `{"cents":5}`, dispatcher.WithCallID("held-1")); err != nil || id != "held-1" {
		t.Fatalf("Submit = %q, %v", id, err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitCatalog(t, d)
	if id, err := d.Submit(t.Context(), "pay", `{"cents":5}`, dispatcher.WithCallID("held-1")); id != "held-1" || err != nil {
		t.Errorf("Submit again = %q, %v; want the held call's id", id, err)
	}
	var ce *windlass.CallError
	if _, err := d.Submit(t.Context(), "pay", `{"cents":6}`, dispatcher.WithCallID("held-1")); !errors.As(err, &ce) || ce.Code != windlass.CodeIDConflict {
		t.Errorf("Submit with other arguments = %v; want id_conflict", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	r, err := d.Call(ctx, "pay", `{"cents":5}`, dispatcher.WithCallID("held-1"))
	t.Logf("Call again = %s %q, %v", r.Code(), r.Content, err)
	if r.Code() == windlass.CodeNoWorker || r.Code() == windlass.CodeTimeout {
		t.Errorf("Call again = %s: the held call has neither", r.Code())
	}
}
