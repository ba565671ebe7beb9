package approval_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// TestReleaseToAFullCallsStream: an approved call whose release the calls
// stream refuses (full at its bound of 1, held by a call of a tool no
// worker takes) is approved but not released, tried again while the
// caller's deadline allows, and once it has passed, answered overloaded,
// never run — and recorded as such: undeliverable, with no "released"
// audit entry (which the dashboard is sent as approval.approved). Before,
// it was marked released, and the dashboard told it was approved and
// released. (Found by a review helper.)
func TestReleaseToAFullCallsStream(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	filler := windlass.MustFunc("filler", func(context.Context, struct{}) (string, error) { return "", nil }).Spec()
	lease, err := f.Registry().Advertise(t.Context(), registry.Advertisement{WorkerID: "idle", Specs: []windlass.Spec{filler}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	bounded := f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: 1}})
	if _, err := bounded.Submit(t.Context(), "filler", map[string]any{}, dispatcher.AllowNoWorker()); err != nil {
		t.Fatal(err)
	}

	id := f.submit(payArgs{To: "bob", Amount: 5}, dispatcher.WithTimeout(2*time.Second))
	h := f.held(id)
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	if code != http.StatusOK || body["status"] != "approved" || body["released"] == true {
		t.Fatalf("approve with the calls stream full = %d %v; want approved, not released", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code() != windlass.CodeOverloaded || f.runs.Load() != 0 {
		t.Fatalf("result = %+v (runs %d); want overloaded, not run", r, f.runs.Load())
	}
	var events []approval.AuditEvent
	fleettest.WaitFor(t, 10*time.Second, "the call's undeliverable audit entry", func() bool {
		events, _, err = f.svc.History(t.Context(), id)
		return err == nil && slices.ContainsFunc(events, func(ev approval.AuditEvent) bool { return ev.Event == "undeliverable" })
	})
	for _, ev := range events {
		if ev.Event == "released" {
			t.Errorf("audit entry %+v: the call was never released (sent to the dashboard as approval.approved)", ev)
		}
		if ev.Event == "undeliverable" && ev.Fields["code"] != string(windlass.CodeOverloaded) {
			t.Errorf("undeliverable entry %+v; want code overloaded", ev)
		}
	}
	if got, err := f.svc.Get(t.Context(), id); err != nil || got.Released || got.Undeliverable != windlass.CodeOverloaded {
		t.Errorf("held call released=%v undeliverable=%q, %v; want not released, undeliverable overloaded", got.Released, got.Undeliverable, err)
	}
}
