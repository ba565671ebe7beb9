package integration_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDispatcherGivenABoundUnderItsRole: a dispatcher given a bound for
// the calls stream (the limits file's max_queued_calls), run as a
// dispatcher user of deploy/nats/accounts.conf, which may not update the
// stream, asks the server once, not again and again (each request waits a
// whole request timeout for the refusal); it starts, says in its warning
// that its user may not update the stream and how to grant it, and the
// stream keeps its bound.
func TestDispatcherGivenABoundUnderItsRole(t *testing.T) {
	ps := startPermServer(t)
	adminJS, _ := jetstream.New(ps.connect(t, "admin", nil))
	if _, err := layout.EnsurePayloads(t.Context(), adminJS, layout.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	nc := ps.connect(t, "dispatcher-a", errs)
	reg, err := registry.New(registry.Config{Client: testserver.StartRedis(t).Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	d, err := dispatcher.New(t.Context(), dispatcher.Config{Conn: nc, Registry: reg, ID: "dispatcher-a",
		Limits: limits.Config{MaxQueuedCalls: 50}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	updates := 0
	for _, v := range violations(t, nc, errs) {
		if !strings.Contains(v.Error(), "STREAM.UPDATE."+layout.CallsStream) {
			t.Errorf("a violation other than the stream update: %v", v)
			continue
		}
		updates++
	}
	if updates != 1 {
		t.Errorf("the dispatcher asked %d times to update the calls stream under a role that may not; want once", updates)
	}
	for _, want := range []string{"could not bound the calls stream", "may not update the stream", "$JS.API.STREAM.UPDATE." + layout.CallsStream} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the dispatcher's logs do not say %q:\n%s", want, logs.String())
		}
	}
	s, err := adminJS.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxMsgs; got == 50 {
		t.Errorf("the calls stream's bound changed to %d under a role that may not change it", got)
	}
}
