package mcpserver_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// pausingHandler is a slog handler that blocks the first record whose
// message is msg until release is closed; reached is closed when it blocks.
// It stands for a slow first sync in mcpserver.New: New reads the catalog,
// logs "tool offered" per tool, and only then starts the goroutine that
// takes the view's Changed channel.
type pausingHandler struct {
	msg     string
	once    *sync.Once
	reached chan struct{}
	release chan struct{}
}

func (h pausingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h pausingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.reached); <-h.release })
	}
	return nil
}
func (h pausingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h pausingHandler) WithGroup(string) slog.Handler      { return h }

// TestStartupChangeIsNotMissed: a change of the fleet's tools while New
// is between its first read of the catalog and the start of its follower
// reaches the MCP server: a tool whose worker started then is listed.
// Before, the follower took the dispatcher's change signal only once it
// ran, so a change in the gap was signalled to nobody, and the server
// offered New's catalog until some other change. The order is forced by
// holding New at its own "tool offered" log line.
func TestStartupChangeIsNotMissed(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker(worker.Config{}, basicTools()...)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "add", "weather", "fail")

	ph := pausingHandler{msg: "mcpserver: tool offered", once: new(sync.Once), reached: make(chan struct{}), release: make(chan struct{})}
	type built struct {
		h   *mcpserver.Handler
		err error
	}
	done := make(chan built, 1)
	go func() {
		h, err := mcpserver.New(t.Context(), mcpserver.Config{Dispatcher: d, Logger: slog.New(ph)})
		done <- built{h, err}
	}()
	select {
	case <-ph.reached: // New has read the catalog: add, weather, fail
	case b := <-done:
		t.Fatalf("New returned (%v) without offering a tool", b.err)
	}

	// The fleet changes now: a worker with a new tool starts, and the
	// dispatcher's view has it (its Changed channel was closed).
	late := windlass.MustFunc("late", func(ctx context.Context, in struct{}) (string, error) { return "here", nil })
	f.startWorker(worker.Config{}, late)
	fleettest.WaitCatalog(t, d, "add", "weather", "fail", "late")

	close(ph.release)
	b := <-done
	if b.err != nil {
		t.Fatal(b.err)
	}
	t.Cleanup(func() { _ = b.h.Close() })
	srv := httptest.NewServer(b.h)
	t.Cleanup(srv.Close)
	cs := connect(t, srv.URL, nil)
	// Nothing else changes in the fleet: the server must list "late"
	// from the change it was signalled during New.
	fleettest.WaitFor(t, 10*time.Second, `tools/list offering "late"`, func() bool { return listTools(t, cs)["late"] != nil })
}
