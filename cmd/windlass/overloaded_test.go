package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// TestCallOverloadedSaysRetryAfter: `windlass call` refused because the
// calls stream is full (bounded to 3 calls by a dispatcher, full of calls
// of a tool whose worker is advertised but takes none) fails with the
// code, and says when to retry; its own dispatcher, given no bound, keeps
// the stream's.
func TestCallOverloadedSaysRetryAfter(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	f := fleettest.New(t)
	spec := windlass.MustFunc("add", func(_ context.Context, in struct{ A, B int }) (int, error) { return in.A + in.B, nil }).Spec()
	lease, err := f.Registry().Advertise(t.Context(), registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: 3}})
	fleettest.WaitCatalog(t, d, "add")
	for range 3 {
		if _, err := d.Submit(t.Context(), "add", map[string]any{"A": 1, "B": 2}); err != nil {
			t.Fatal(err)
		}
	}
	for _, async := range []bool{false, true} {
		args := []string{"call", "add", `{"A":1,"B":2}`, "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL()}
		if async {
			args = append(args[:1], append([]string{"--async"}, args[1:]...)...)
		}
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "overloaded") || !strings.Contains(err.Error(), "retry after 1s") {
			t.Errorf("windlass call (async %v) to a full stream = %v, stdout %q; want overloaded, retry after 1s", async, err, stdout.String())
		}
	}
}
