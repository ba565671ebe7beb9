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
	f := fleettest.New(t)
	js := f.JetStream()
	opts := layout.StreamOptions{ResultsMaxAge: 2 * time.Second, Duplicates: time.Second}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(opts)...); err != nil {
		t.Fatal(err)
	}
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
