package dispatcher_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestALostAckKeepsTheCallsArguments: a call whose arguments go by
// reference is stored, and its acknowledgement is lost, so the dispatcher
// publishes it again and the calls stream answers "duplicate" — of this
// very call, which points at this upload. The upload stays, and the call
// runs with its arguments. Before, the duplicate was taken for another
// submit's call and the upload deleted: the worker answered
// payload_unreadable, "The tool did not run", to a call accepted with good
// arguments. (Found by a review helper.)
func TestALostAckKeepsTheCallsArguments(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	var runs atomic.Int64
	busy := make(chan struct{})
	tool := windlass.MustFunc("mirror", func(ctx context.Context, in mirrorArgs) (string, error) {
		runs.Add(1)
		if in.Text == "busy" {
			<-busy // the call under test waits in the queue meanwhile
		}
		return in.Text, nil
	})
	f.StartWorker(worker.Config{}, fleettest.WithToolOptions(tool, worker.WithConcurrency(1)))
	dropper := &fleettest.AckDropper{Stream: layout.CallsStream}
	d := f.Dispatcher(dispatcher.Config{Conn: f.NATS.Connect(t, nats.SetCustomDialer(dropper)), InlineLimit: 1 << 10})
	fleettest.WaitCatalog(t, d, "mirror")

	if _, err := d.Submit(t.Context(), "mirror", mirrorArgs{Text: "busy"}); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the busy call running", func() bool { return runs.Load() == 1 })
	dropper.Arm()
	text := strings.Repeat("y", 8<<10) // over the inline limit: by reference
	id, err := d.Submit(t.Context(), "mirror", mirrorArgs{Text: text})
	close(busy)
	if err != nil {
		t.Fatalf("Submit = %v", err)
	}
	if !dropper.Dropped() {
		t.Fatal("no acknowledgement was dropped")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := d.Wait(ctx, id)
	if err != nil || r.IsError || r.Content != text {
		t.Errorf("Wait = %.300q (code %q), %v; want the text back: the call was accepted with its arguments", r.Content, r.Code(), err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the tool ran %d times; want twice (the busy call, then this one)", n)
	}
}
