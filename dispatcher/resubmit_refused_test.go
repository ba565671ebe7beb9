package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestAResubmitIsTheCallWhateverTheFleetIsNow: a call id the caller chose
// that the fleet accepted is that call, even when a check of the fleet as
// it is now would refuse a new call — here its tool has no live worker
// (a rolling restart). Resubmitted with the same arguments it is answered
// with the call's result (it ran once), not no_worker ("never queued"),
// through Call and Submit; with other arguments it is id_conflict; a new
// id is still refused no_worker. (The HTTP API's tests cover a redeploy
// that changed the tool's spec: resubmit_refused_test.go there.)
func TestAResubmitIsTheCallWhateverTheFleetIsNow(t *testing.T) {
	t.Parallel()
	f, w, d, runs := chargeFleet(t)
	r, err := d.Call(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-1"))
	if err != nil || r.IsError {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	fleettest.StoredResult(t, f.JetStream(), "pay-1")
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitCatalog(t, d) // no live worker of charge

	again, err := d.Call(t.Context(), "charge", `{ "cents": 500 }`, dispatcher.WithCallID("pay-1"))
	if err != nil || again.IsError || again.Content != r.Content {
		t.Errorf("Call again = %+v, %v; want the call's result %q", again, err, r.Content)
	}
	if id, err := d.Submit(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-1")); id != "pay-1" || err != nil {
		t.Errorf("Submit again = %q, %v; want the call's id", id, err)
	}
	var ce *windlass.CallError
	if _, err := d.Submit(t.Context(), "charge", `{"cents":900}`, dispatcher.WithCallID("pay-1")); !errors.As(err, &ce) || ce.Code != windlass.CodeIDConflict {
		t.Errorf("Submit with other arguments = %v; want id_conflict", err)
	}
	if _, err := d.Submit(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-2")); !errors.As(err, &ce) || ce.Code != windlass.CodeNoWorker {
		t.Errorf("Submit of a new id = %v; want no_worker", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("charge ran %d times", n)
	}
}

// TestAResubmitWhoseRecordCannotBeReadIsNotRefused: a caller resubmits its
// own id while the tool has no live worker and the streams cannot be read
// (NATS down). Whether the id names a call the fleet accepted cannot be
// known, so the caller is told unavailable — ask again — not no_worker,
// "never queued", which at 2a3079f it was: the read failing was taken for
// "no record" (found by a review helper).
func TestAResubmitWhoseRecordCannotBeReadIsNotRefused(t *testing.T) {
	t.Parallel()
	f, w, d, _ := chargeFleet(t)
	if r, err := d.Call(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-dark")); err != nil || r.IsError {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitCatalog(t, d) // no live worker of charge
	f.NATS.Stop()

	_, err := d.Submit(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-dark"))
	var ce *windlass.CallError
	if !errors.Is(err, dispatcher.ErrUnavailable) || !errors.As(err, &ce) || ce.Code != windlass.CodeUnavailable {
		t.Errorf("Submit while the record cannot be read = %v; want unavailable", err)
	}
}

// chargeFleet is a fleet serving "charge" (its value: how many times it
// ran, counted in runs), its worker and a dispatcher.
func chargeFleet(t *testing.T) (f *fleettest.Fleet, w *fleettest.Worker, d *dispatcher.Dispatcher, runs *atomic.Int64) {
	runs = new(atomic.Int64)
	charge := windlass.MustFunc("charge", func(ctx context.Context, in struct {
		Cents int `json:"cents"`
	}) (int64, error) {
		return runs.Add(1), nil
	})
	f = fleettest.New(t)
	w = f.StartWorker(worker.Config{}, charge)
	d = f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "charge")
	return f, w, d, runs
}

// TestArgumentsOfTooManyValuesAreNotHashedForAResubmit: arguments refused
// for their values (16 MiB: a string with an escape, which the canonical
// hash cannot take as it is, and 8 million zeros) with the caller's own
// id are refused invalid_arguments without being decoded — whether or not
// the id names a call. Before, the resubmit check hashed them first, for
// any caller's id, decoding them all: about 600 MiB of heap and millions
// of allocations for a refusal. (Found by a review helper.)
func TestArgumentsOfTooManyValuesAreNotHashedForAResubmit(t *testing.T) {
	_, _, d, _ := chargeFleet(t)
	if r, err := d.Call(t.Context(), "charge", `{"cents":500}`, dispatcher.WithCallID("pay-1")); err != nil || r.IsError {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	huge := json.RawMessage(`{"note":"a\nb","cents":[` + strings.Repeat("0,", 8<<20) + `0]}`)
	for _, id := range []string{"pay-1", "never-used"} {
		var err error
		allocs := testing.AllocsPerRun(1, func() { _, err = d.Submit(t.Context(), "charge", huge, dispatcher.WithCallID(id)) })
		var ce *windlass.CallError
		if !errors.As(err, &ce) || ce.Code != windlass.CodeInvalidArguments || !strings.Contains(ce.Message, "JSON values") {
			t.Errorf("id %s: Submit = %v; want invalid_arguments, rule values", id, err)
		}
		if allocs > 100_000 {
			t.Errorf("id %s: refusing took %.0f allocations: the arguments were decoded", id, allocs)
		}
	}
}

// floats are arguments {"note":"a\nb","xs":[0.5,…]} of n numbers (n+3
// values); the escape makes their canonical hash decode them.
func floats(n int) json.RawMessage {
	return json.RawMessage(`{"note":"a\nb","xs":[` + strings.TrimSuffix(strings.Repeat("0.5,", n), ",") + `]}`)
}

// TestARaisedBoundOnValuesEndToEnd: a tool that raised its bound on
// argument values (WithMaxArgumentValues) takes 150,000 numbers through
// the dispatcher and the worker, which both validate — by reference (600
// KB) — and a resubmit of that call's id while its worker is away is that
// call, not a refusal: the resubmit's check hashes within the tool's
// bound, not the default's (found by a review helper: no_worker, "never
// queued", for a call that had run). A tool of the default bound refuses
// the same arguments.
func TestARaisedBoundOnValuesEndToEnd(t *testing.T) {
	sum := func(_ context.Context, in struct {
		Note string    `json:"note"`
		Xs   []float64 `json:"xs"`
	}) (int, error) {
		return len(in.Xs), nil
	}
	f := fleettest.New(t)
	w := f.StartWorker(worker.Config{}, windlass.MustFunc("sumbig", sum, windlass.WithMaxArgumentValues(200_000)), windlass.MustFunc("sum", sum))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "sumbig", "sum")
	args := floats(150_000)
	if r, err := d.Call(t.Context(), "sumbig", args, dispatcher.WithCallID("vec-1")); err != nil || r.IsError || r.Content != "150000" {
		t.Fatalf("150,000 values, bound 200,000: %+v, %v", r, err)
	}
	var ce *windlass.CallError
	if _, err := d.Submit(t.Context(), "sum", args); !errors.As(err, &ce) || ce.Code != windlass.CodeInvalidArguments || !strings.Contains(ce.Message, "100,000") {
		t.Errorf("150,000 values, default bound: %v; want invalid_arguments", err)
	}
	fleettest.StoredResult(t, f.JetStream(), "vec-1")
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitCatalog(t, d)
	if id, err := d.Submit(t.Context(), "sumbig", args, dispatcher.WithCallID("vec-1")); id != "vec-1" || err != nil {
		t.Errorf("resubmit of the call while its worker is away = %q, %v; want its id", id, err)
	}
}
