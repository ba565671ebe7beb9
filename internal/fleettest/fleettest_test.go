package fleettest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestWaitFor(t *testing.T) {
	t.Parallel()
	n := 0
	took := fleettest.WaitFor(t, 10*time.Second, "the third look", func() bool { n++; return n == 3 })
	if n != 3 || took < 2*fleettest.PollInterval {
		t.Errorf("WaitFor returned after %d looks and %s; want 3 looks, two polls apart", n, took)
	}

	// A condition that never holds fails the test, naming it. (The fake's
	// Fatalf returns, so WaitFor goes on polling: the condition ends it.)
	tb := &fatalTB{TB: t}
	fleettest.WaitFor(tb, 20*time.Millisecond, "a miracle", func() bool { return tb.msg != "" })
	if tb.msg != "a miracle: not within 20ms" {
		t.Errorf("Fatalf(%q); want the condition and the deadline named", tb.msg)
	}
}

func TestFleet(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t, fleettest.WithRegistryTTL(3*time.Second))
	if ttl := f.Registry().TTL(); ttl != 3*time.Second {
		t.Errorf("registry TTL %s, want the option's 3s", ttl)
	}
	upper := windlass.MustFunc("upper", func(_ context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return strings.ToUpper(in.Text), nil
	})
	echo := windlass.MustFunc("echo", func(_ context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	w := f.StartWorker(worker.Config{}, fleettest.WithToolOptions(upper, worker.WithConcurrency(1)), echo)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "upper", "echo")

	r, err := d.Call(t.Context(), "upper", map[string]string{"text": "hi"})
	if err != nil || r.Content != "HI" || r.Worker != w.ID() {
		t.Errorf("Call(upper) = %+v, %v; want HI from %s", r, err, w.ID())
	}
	if err := w.Stop(); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if err := w.Stop(); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	// A stopped worker withdraws: the catalog empties.
	fleettest.WaitCatalog(t, d)
}
