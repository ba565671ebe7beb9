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
	f := fleetKeepingRecordsFor(t, 2*time.Second)
	js := f.JetStream()
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

// TestARetryLongAfterThePublishRuns: a call with a long deadline whose
// first attempt runs (and fails retryably) for longer than the cancels
// stream keeps a cancellation. Its first attempt checked that it was not
// canceled when it started, and a cancellation since is younger than the
// stream's max age: its retry runs. At fd2fb79 it was answered timeout,
// "waited … in the queue … it was not run", measured from the first
// publish. The streams' max age is 2 s here instead of 24 h, as in
// TestACallCanceledLongBeforeItIsPulledDoesNotRun. (Found by a review
// helper.)
func TestARetryLongAfterThePublishRuns(t *testing.T) {
	t.Parallel()
	f := fleetKeepingRecordsFor(t, 2*time.Second)
	var runs atomic.Int64
	job := windlass.MustFunc("batch_job", func(ctx context.Context, _ struct{}) (string, error) {
		if runs.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond) // a long first attempt (25 h against 24 h)
			return "", windlass.Retryable(context.DeadlineExceeded)
		}
		return "done", nil
	}, windlass.WithTimeout(time.Minute))
	f.StartWorker(worker.Config{}, fleettest.WithToolOptions(job, worker.WithRetry(worker.RetryPolicy{InitialBackoff: 100 * time.Millisecond})))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "batch_job")

	r, err := d.Call(t.Context(), "batch_job", nil, dispatcher.WithTimeout(time.Hour))
	t.Logf("answer: %+v, %v; runs %d", r, err, runs.Load())
	if err != nil || r.IsError || r.Content != "done" {
		t.Errorf("the caller was told %q %q (attempt %d), the tool ran %d time(s); want its retry's result", r.Code(), r.Content, r.Attempt, runs.Load())
	}
}

// fleetKeepingRecordsFor is a fleet whose results, cancellations and other
// records are kept for keep (24 h by default): the tests of calls older
// than what the fleet remembers of them.
func fleetKeepingRecordsFor(t *testing.T, keep time.Duration) *fleettest.Fleet {
	t.Helper()
	f := fleettest.New(t)
	opts := layout.StreamOptions{ResultsMaxAge: keep, Duplicates: keep / 2}
	if err := layout.EnsureStreams(t.Context(), f.JetStream(), layout.AllStreams(opts)...); err != nil {
		t.Fatal(err)
	}
	return f
}
