package dispatcher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestACallCanceledLongBeforeItIsPulledDoesNotRun: a call may have a
// deadline past the 24 h the cancels and results streams keep records
// (nothing bounds it). Canceled while queued (its tool's workers down, or
// a long backlog), its caller is told canceled. A worker that pulls it
// once the cancellation and the canceled answer have aged out of their
// streams cannot know it was canceled: it answers it timeout, without
// running it. Before, it found no cancellation and ran it. The streams'
// max age is 2 s here instead of 24 h; the call's deadline, one hour, is
// past it as a 48 h deadline is past 24 h. (Found by a review helper.)
func TestACallCanceledLongBeforeItIsPulledDoesNotRun(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	js := f.JetStream()
	opts := layout.StreamOptions{ResultsMaxAge: 2 * time.Second, Duplicates: time.Second}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(opts)...); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	job := windlass.MustFunc("batch_job", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		return "done", nil
	})
	first := f.StartWorker(worker.Config{}, job)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "batch_job")
	if err := first.Stop(); err != nil { // the tool's workers go down
		t.Fatal(err)
	}

	id, err := d.Submit(t.Context(), "batch_job", nil, dispatcher.AllowNoWorker(), dispatcher.WithTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Cancel(t.Context(), id, "not needed any more"); err != nil {
		t.Fatalf("Cancel = %v", err)
	}
	if r, err := d.Result(t.Context(), id); err != nil || r.Code() != windlass.CodeCanceled {
		t.Fatalf("the caller was told %+v, %v; want canceled", r, err)
	}
	// The records age out (24 h in production).
	cancels, err := js.Stream(t.Context(), layout.CancelsStream)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 30*time.Second, "the cancellation aged out of its stream", func() bool {
		info, err := cancels.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})

	// A worker of the tool comes back; the call, still queued under its
	// deadline, is pulled.
	f.StartWorker(worker.Config{}, job)
	calls, err := js.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the queued call taken off the queue", func() bool {
		info, err := calls.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
	if n := runs.Load(); n != 0 {
		t.Errorf("a call its caller was told was canceled ran %d time(s)", n)
	}
}
