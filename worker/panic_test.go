package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/worker"
)

// TestToolPanicIsLoggedThroughTheWorkersLogger runs a tool that panics: the
// caller gets a panic result, and the panic, with its stack, is logged once
// through Config.Logger with the call's context (its span) and the call's
// attributes, and not through the global logger. Not parallel: it replaces
// the global logger.
func TestToolPanicIsLoggedThroughTheWorkersLogger(t *testing.T) {
	global := newRecords()
	prev := slog.Default()
	slog.SetDefault(slog.New(global))
	t.Cleanup(func() { slog.SetDefault(prev) })
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	b := newBench(t)
	logs := newRecords()
	boom := windlass.MustFunc("boom", func(context.Context, struct{}) (int, error) { panic("kaboom") })
	b.start(worker.Config{Logger: slog.New(logs), TracerProvider: tp}, boom)
	b.publish(windlass.ToolCall{ID: "panics-1", Name: "boom"})
	if r := b.result(5 * time.Second); r.Code() != windlass.CodePanic || r.Content != `Tool "boom" panicked: kaboom` {
		t.Fatalf("result %+v, want the panic result", r)
	}
	b.consumerSettled("boom")

	var panics []record
	for _, r := range logs.all() {
		if strings.Contains(r.msg, "panicked") {
			panics = append(panics, r)
		}
	}
	if len(panics) != 1 {
		t.Fatalf("the worker's logger got %d panic lines, want 1: %+v", len(panics), logs.all())
	}
	p := panics[0]
	if p.level != slog.LevelError || p.attrs["panic"] != "kaboom" || !strings.Contains(p.attrs["stack"], "panic_test.go") ||
		p.attrs["call_id"] != "panics-1" || p.attrs["tool"] != "boom" {
		t.Errorf("panic line %+v: want an error with the panic, its stack and the call's id and tool", p)
	}
	if !p.traced {
		t.Errorf("panic line %q was not logged with the call's context (no span in it)", p.msg)
	}
	for _, r := range global.all() {
		if strings.Contains(r.msg, "panicked") {
			t.Errorf("the global logger got %q; the panic must go to Config.Logger only", r.msg)
		}
	}
}

// record is one log line a records handler received.
type record struct {
	level  slog.Level
	msg    string
	attrs  map[string]string // the logger's and the line's
	traced bool              // logged with a context carrying a valid span
}

// records is a slog.Handler that keeps the lines it receives, and those of
// the handlers derived from it.
type records struct {
	kept  *kept
	attrs []slog.Attr
}

type kept struct {
	mu    sync.Mutex
	lines []record
}

func newRecords() *records { return &records{kept: &kept{}} }

func (h *records) Enabled(context.Context, slog.Level) bool { return true }

func (h *records) Handle(ctx context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]string{}, traced: trace.SpanContextFromContext(ctx).IsValid()}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.kept.mu.Lock()
	defer h.kept.mu.Unlock()
	h.kept.lines = append(h.kept.lines, rec)
	return nil
}

func (h *records) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &records{kept: h.kept, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *records) WithGroup(string) slog.Handler { return h }

func (h *records) all() []record {
	h.kept.mu.Lock()
	defer h.kept.mu.Unlock()
	return append([]record(nil), h.kept.lines...)
}
