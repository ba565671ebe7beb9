package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
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

// TestCallKeyAndLimits: `windlass call --key` counts the call for that key
// (its status names it), and the limits flags give the command's own
// dispatcher the fleet's limits: with a key rate of 1 a minute, the second
// call of the key is refused rate_limited with when to retry, while
// another key's is admitted. A key that cannot be one is a usage error.
func TestCallKeyAndLimits(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	f := fleettest.New(t)
	f.StartWorker(worker.Config{}, windlass.MustFunc("add", func(_ context.Context, in struct{ A, B int }) (int, error) { return in.A + in.B, nil }))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "add")
	call := func(id, key string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"call", "add", `{"A":1,"B":2}`, "--id", id, "--key", key, "--key-rate", "1/m",
			"--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL()}, &stdout, &stderr)
		return strings.TrimSpace(stdout.String()), err
	}
	if out, err := call("keyed-1", "acme"); err != nil || out != "3" {
		t.Fatalf("first call of key acme = %q, %v; want 3", out, err)
	}
	if st, err := d.Status(t.Context(), "keyed-1"); err != nil || st.Key != "acme" {
		t.Errorf("status of the call = %+v, %v; want key acme", st, err)
	}
	if _, err := call("keyed-2", "acme"); err == nil || !strings.Contains(err.Error(), "rate_limited") || !strings.Contains(err.Error(), "retry after") {
		t.Errorf("second call of key acme within its rate = %v; want rate_limited, retry after", err)
	}
	if out, err := call("keyed-3", "globex"); err != nil || out != "3" {
		t.Errorf("a call of another key = %q, %v; want 3", out, err)
	}
	var ee *exitError
	if _, err := call("keyed-4", "a b"); !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--key") {
		t.Errorf("--key \"a b\" = %v; want a usage error naming --key", err)
	}
}
