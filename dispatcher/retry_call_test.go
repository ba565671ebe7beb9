package dispatcher_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestAGeneratedIDReusedWithOtherArgumentsConflicts: a client learns the
// id the dispatcher generated for its call (Submit returns it; the HTTP
// API answers it) and later submits it as its own id with other
// arguments. One id is one call: the second submit is refused
// id_conflict, never answered with the first call's result. Before, only
// a caller's own id recorded its arguments' hash, so a generated id's
// record matched any arguments. (Found by a review helper.)
func TestAGeneratedIDReusedWithOtherArgumentsConflicts(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	add := countingAdd(&runs)
	e := newEnv(t, add)
	id, err := e.d.Submit(t.Context(), "add", `{"a":1,"b":2}`) // a generated id
	if err != nil {
		t.Fatal(err)
	}
	if r, err := e.d.Wait(waitCtx(t, 10*time.Second), id); err != nil || r.Content != "3" {
		t.Fatalf("first call = %+v, %v", r, err)
	}
	// The same id, now chosen by the caller, with other arguments.
	r, err := e.d.Call(t.Context(), "add", `{"a":100,"b":200}`, dispatcher.WithCallID(id))
	if r.Code() != windlass.CodeIDConflict {
		t.Errorf("Call(own id = the generated one, other arguments) = content %q code %q err %v; want id_conflict, not the other call's result", r.Content, r.Code(), err)
	}
	if _, err := e.d.Submit(t.Context(), "add", `{"a":100,"b":200}`, dispatcher.WithCallID(id)); err == nil {
		t.Errorf("Submit(own id = the generated one, other arguments) accepted; want id_conflict")
	}
	t.Logf("add ran %d times (the second call's arguments never ran)", runs.Load())
}

// TestAWatchBeforeTheCallOnOneInstance: a caller starts watching the call
// id it is about to use (so it misses no event), then makes the call on
// the same dispatcher instance. The call is published and runs. Before, a
// Wait (which Watch runs) registered as the Call in flight of its id, and
// the Call, taken for a retry, was never published and was answered
// "timeout". (Found by a review helper.)
func TestAWatchBeforeTheCallOnOneInstance(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	echo := windlass.MustFunc("echo", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		runs.Add(1)
		return in.Text, nil
	})
	e := newEnv(t, echo)
	const id = "toolu_watched_first"
	watchCtx, stopWatch := context.WithCancel(t.Context())
	defer stopWatch()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev, err := range e.d.Watch(watchCtx, id) {
			if err != nil || ev.Kind == windlass.EventFinished {
				return
			}
		}
	}()
	// Watch waits for the call's result as soon as it follows its events.
	fleettest.WaitFor(t, 10*time.Second, "the watch to wait for the id", func() bool { return e.d.WaitingOn(id) })
	start := time.Now()
	r, err := e.d.Call(t.Context(), "echo", `{"text":"hi"}`, dispatcher.WithCallID(id), dispatcher.WithTimeout(4*time.Second))
	t.Logf("Call took %s", time.Since(start).Round(time.Millisecond))
	if err != nil || r.IsError || r.Content != "hi" {
		t.Errorf("Call after a Watch of its id on the same instance = content %q code %q err %v; want \"hi\"", r.Content, r.Code(), err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
	if st, err := e.d.Status(t.Context(), id); err == nil {
		t.Logf("status after the Call: %s", st.State)
	} else if !errors.Is(err, dispatcher.ErrUnavailable) {
		t.Logf("status: %v", err)
	}
	stopWatch()
	<-watchDone
}

// TestARetryWithAShorterDeadlineIsNotToldTimeout: a caller's Call with its
// own id is still running when the caller retries it (another instance,
// as a load balancer would send it) with less time left (a client's own
// request deadline). The retry's wait ends at its own deadline; the call's
// deadline is the first submit's, and it goes on to succeed. The retry is
// told unavailable, with the call's id to ask about, not "timeout": before,
// it was told the call timed out (and a model told "timeout" calls again
// under a new id: the tool runs twice). (Found by a review helper.)
func TestARetryWithAShorterDeadlineIsNotToldTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate()
	e.startWorker(worker.Config{}, g.tool("slowpoke"))
	other := e.another()
	e.liveIn(other, "slowpoke", "")
	const id = "toolu_retried_short"
	first := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := e.d.Call(t.Context(), "slowpoke", map[string]string{"text": "once"}, dispatcher.WithCallID(id), dispatcher.WithTimeout(30*time.Second))
		first <- r
	}()
	g.waitStarted(t, id)
	retry, err := other.Call(t.Context(), "slowpoke", map[string]string{"text": "once"}, dispatcher.WithCallID(id), dispatcher.WithTimeout(time.Second))
	close(g.release)
	r := <-first
	t.Logf("first Call: %q; retry: code %q %q, err %v", r.Content, retry.Code(), retry.Content, err)
	if r.Content != "released once" {
		t.Fatalf("first Call = %+v", r)
	}
	if retry.Code() != windlass.CodeUnavailable || retry.CallID != id || !errors.Is(err, dispatcher.ErrUnavailable) {
		t.Errorf("the retry was answered %q (%q, call id %q), %v, while the call, whose deadline is 30 s away, ran on and succeeded; want unavailable with the call's id", retry.Code(), retry.Content, retry.CallID, err)
	}
}
