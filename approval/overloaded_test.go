package approval_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// TestReleaseToAFullCallsStream: an approved call whose release the calls
// stream refuses (full at its bound of 1, held by a call of a tool no
// worker takes) is approved but not released, tried again while the
// caller's deadline allows, and once it has passed, answered overloaded,
// never run.
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
}
