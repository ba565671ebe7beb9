package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestCancelWhoseCanceledResultIsNotStoredSaysCanceled: `windlass cancel`
// of a running call while the results stream refuses writes stores the
// cancellation (the tool's context ends) but not the canceled result. The
// call is canceled all the same: the command says so and exits 0, rather
// than failing as if nothing had been canceled; once the stream takes
// writes, the call's result is canceled.
func TestCancelWhoseCanceledResultIsNotStoredSaysCanceled(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	f := fleettest.New(t)
	long := fleettest.NewUntilCanceled("long")
	f.StartWorker(worker.Config{}, long)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "long")
	id, err := d.Submit(t.Context(), "long", struct{}{}, dispatcher.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	long.Started(t)
	resume := f.RefuseResults()

	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"cancel", id, "--reason", "stop", "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL(), "--log-level", "error"}, &stdout, &stderr)
	if out := stdout.String(); err != nil || !strings.HasPrefix(out, "canceled "+id+" (its canceled result is not stored yet") {
		t.Errorf("cancel = %q, %v (stderr %q); want it to say canceled, its result not stored yet, and succeed", out, err, stderr.String())
	}
	if cause := long.Canceled(t); !errors.Is(cause, windlass.ErrCallCanceled) {
		t.Errorf("the tool's context ended with %v; want windlass.ErrCallCanceled", cause)
	}
	resume()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if r, err := d.Wait(ctx, id); err != nil || r.Code() != windlass.CodeCanceled {
		t.Errorf("the call's result = %v, %v; want canceled", r.Code(), err)
	}
}
