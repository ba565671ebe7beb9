package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestADeadCallWithArgumentsByReferenceReplays: a call whose arguments
// travel by reference exhausts its retries and is recorded dead; its
// record keeps the reference (PROTOCOL.md, "Payloads by reference"). Its
// replay runs with the original arguments, counted for the same key.
// Before, the replay submitted the record's placeholder as the arguments
// and was refused invalid_arguments, and a replay was counted for the
// default key. (Found by a review helper.)
func TestADeadCallWithArgumentsByReferenceReplays(t *testing.T) {
	t.Parallel()
	type args struct {
		Text string `json:"text"`
	}
	var mu sync.Mutex
	var fail = true
	var seen []int
	tool := windlass.MustFunc("bulky", func(ctx context.Context, in args) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, len(in.Text))
		if fail {
			return "", windlass.Retryable(errors.New("upstream down"))
		}
		return "got " + in.Text[:3], nil
	})
	e := newEnv(t)
	e.StartWorker(worker.Config{}, tool)
	// A small inline limit: the arguments go by reference.
	d := e.Dispatcher(dispatcher.Config{InlineLimit: 1 << 10})
	fleettest.WaitCatalog(t, d, "bulky")
	text := strings.Repeat("abc", 2000) // 6 KiB, over the 1 KiB inline limit
	r, err := d.Call(waitCtx(t, 30*time.Second), "bulky", args{Text: text}, dispatcher.WithTimeout(20*time.Second), dispatcher.WithKey("tenant-a"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError {
		t.Fatalf("first call = %+v, want its retries exhausted", r)
	}
	dead, err := d.DeadCalls(t.Context(), "bulky", 0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("DeadCalls = %+v, %v", dead, err)
	}
	if dead[0].Call.ArgumentsRef == nil {
		t.Fatalf("dead record %+v: arguments not by reference; the test needs them so", dead[0].Call)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	// The caller has its answer once it is stored; the worker records the
	// call dead and terminates its message just after. A replay that comes
	// before the message is gone is refused "unavailable, try again" (the
	// call may still be delivered), and the caller tries again, as told.
	var newID string
	fleettest.WaitFor(t, 20*time.Second, "the dead call's message gone from the work queue, so it replays", func() bool {
		newID, err = d.Replay(t.Context(), dead[0].Seq, dispatcher.WithTimeout(10*time.Second))
		if err != nil && !errors.Is(err, dispatcher.ErrUnavailable) {
			t.Fatalf("Replay of a dead call whose arguments are by reference, seconds after it died = %q, %v; want it replayed with the same arguments", newID, err)
		}
		return err == nil
	})
	res, err := d.Wait(waitCtx(t, 10*time.Second), newID)
	if err != nil || res.IsError || res.Content != "got abc" {
		t.Errorf("replayed call = %+v, %v; want it run with the original arguments", res, err)
	}
	if st, err := d.Status(t.Context(), newID); err != nil || st.Key != "tenant-a" {
		t.Errorf("replayed call's status = %+v, %v; want it counted for key tenant-a, as the call was", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(seen); n < 2 || seen[n-1] != len(text) {
		t.Errorf("the tool saw arguments of %v bytes; want the replay's %d", seen, len(text))
	}
}
