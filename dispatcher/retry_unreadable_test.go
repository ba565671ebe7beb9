package dispatcher_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestARetryIsNotToldTimeoutWhenTheCallsStreamIsUnreadable: as
// TestARetryWithAShorterDeadlineIsNotToldTimeout, but the retrying
// instance cannot read the calls stream (its leader unreachable; the
// results stream reads fine). Its wait ends at its own deadline; the
// call's record, which says the call's deadline is 30 s away, cannot be
// read: the retry is told unavailable, with the call's id, not timeout.
// (Found by a review helper.)
func TestARetryIsNotToldTimeoutWhenTheCallsStreamIsUnreadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate()
	e.startWorker(worker.Config{}, g.tool("slowpoke"))
	blocker := &fleettest.ReadBlocker{Stream: layout.CallsStream}
	other := e.Dispatcher(dispatcher.Config{Conn: e.NATS.Connect(t, nats.SetCustomDialer(blocker))})
	e.liveIn(other, "slowpoke", "")
	const id = "toolu_retried_unreadable"
	first := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := e.d.Call(t.Context(), "slowpoke", map[string]string{"text": "once"}, dispatcher.WithCallID(id), dispatcher.WithTimeout(30*time.Second))
		first <- r
	}()
	g.waitStarted(t, id)
	blocker.Block(true)
	retry, err := other.Call(t.Context(), "slowpoke", map[string]string{"text": "once"}, dispatcher.WithCallID(id), dispatcher.WithTimeout(8*time.Second))
	lost := blocker.Lost()
	blocker.Block(false)
	close(g.release)
	r := <-first
	t.Logf("first Call: %q; retry: code %q %q, err %v; calls-stream reads lost: %d", r.Content, retry.Code(), retry.Content, err, lost)
	if r.Content != "released once" {
		t.Fatalf("first Call = %+v", r)
	}
	if lost == 0 {
		t.Fatal("no read of the calls stream was lost")
	}
	if retry.Code() != windlass.CodeUnavailable || retry.CallID != id {
		t.Errorf("the retry was told %q (%q) while the call, whose deadline is 30 s away, ran on and succeeded; want unavailable with the call's id", retry.Code(), retry.Content)
	}
}
