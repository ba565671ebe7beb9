package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

// TestAResultUploadingWhenTheGraceEndsIsStored: a tool returns its large
// result successfully, inside the worker's shutdown grace; the result goes
// by reference, and its upload is still under way when the grace runs
// out. The tool did everything right and finished in time: its answer is
// stored, by the first worker, and the call does not run again. Before,
// the upload ran under the calls' context, which the grace's end cancels:
// it failed, the call was left for redelivery, and the tool ran again on
// another worker. (Found by a review helper.)
func TestAResultUploadingWhenTheGraceEndsIsStored(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	returned := make(chan error, 4)
	release := make(chan struct{})
	big := strings.Repeat("y", 48<<20) // by reference: an upload of 48 MiB
	tool := windlass.MustFunc("big", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		info, _ := windlass.CallInfoFromContext(ctx)
		if info.Attempt == 1 {
			<-release
		}
		returned <- ctx.Err() // nil: it returns before its context ends
		return big, nil
	})
	var logs testserver.Buffer
	first, stopFirst := b.start(worker.Config{ID: "first", Logger: slog.New(slog.NewTextHandler(&logs, nil)), AckWait: 2 * time.Second, ShutdownGrace: 50 * time.Millisecond}, tool)
	b.publish(windlass.ToolCall{ID: "big-1", Name: "big"})
	fleettest.WaitFor(t, 10*time.Second, "the call started", func() bool { return runs.Load() == 1 })
	close(release)
	if err := <-returned; err != nil {
		t.Fatalf("the tool's context ended (%v) before it returned; the test needs it to return in time", err)
	}
	// The tool has returned its result successfully; the worker is told
	// to stop while the result uploads.
	stopFirst()
	s := first.Stats()
	t.Logf("first worker stats after shutdown: %+v", s)
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "redelivery") || strings.Contains(l, "grace") {
			t.Logf("first worker: %.400s", l)
		}
	}
	b.start(worker.Config{ID: "second", AckWait: 2 * time.Second}, tool)
	r := b.result(60 * time.Second)
	if n := runs.Load(); n != 1 || r.Worker != "first" {
		t.Errorf("the tool ran %d times, answered by %q attempt %d; want once, by the first worker: it returned its result successfully within the grace", n, r.Worker, r.Attempt)
	}
}
