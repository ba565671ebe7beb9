package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/worker"
)

// wantOverloaded checks that err is the refusal of a full calls stream:
// code overloaded, retryable after limits.SlotRetryAfter, naming bound.
func wantOverloaded(t *testing.T, what string, err error, bound string) {
	t.Helper()
	var ce *windlass.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: err = %v; want a *windlass.CallError, code overloaded", what, err)
	}
	if ce.Code != windlass.CodeOverloaded || !ce.Retryable || ce.RetryAfter() != limits.SlotRetryAfter ||
		!strings.Contains(ce.Message, "queue is full") || !strings.Contains(ce.Message, bound) {
		t.Fatalf("%s: refusal = %+v; want overloaded, retryable after %s, saying the queue is full (%s)", what, ce, limits.SlotRetryAfter, bound)
	}
}

// queued is how many messages the calls stream holds, and its bound.
func queued(t *testing.T, js jetstream.JetStream) (msgs uint64, cfg jetstream.StreamConfig) {
	t.Helper()
	s, err := js.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.Config
}

// TestFullCallsStreamRefusesOverloaded fills a calls stream bounded to 3
// calls (a tool with no live worker, so nothing leaves it): the next
// Submit and Call are refused at once overloaded, with a retry-after,
// never retried until their deadline nor answered unavailable; nothing of
// the refused call is stored (its status is unknown), and once workers
// have made room, its id is accepted and run.
func TestFullCallsStreamRefusesOverloaded(t *testing.T) {
	t.Parallel()
	e := &env{Fleet: fleettest.New(t), t: t}
	e.d = e.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: 3}})
	e.advertiseUnserved(greet().Spec())
	args := map[string]any{"name": "ada"}
	for range 3 {
		if _, err := e.d.Submit(t.Context(), "greet", args, dispatcher.AllowNoWorker()); err != nil {
			t.Fatal(err)
		}
	}
	js := e.JetStream()
	if n, cfg := queued(t, js); n != 3 || cfg.MaxMsgs != 3 || cfg.Discard != jetstream.DiscardNew {
		t.Fatalf("calls stream: %d messages, MaxMsgs %d, %s; want 3, 3, DiscardNew", n, cfg.MaxMsgs, cfg.Discard)
	}

	// The deadline is far: a refusal that is retried until it would be
	// answered unavailable, a minute later.
	_, err := e.d.Submit(t.Context(), "greet", args, dispatcher.AllowNoWorker(), dispatcher.WithCallID("late"), dispatcher.WithTimeout(time.Minute))
	wantOverloaded(t, "Submit", err, "bound of 3 calls")
	r, err := e.d.Call(t.Context(), "greet", args, dispatcher.AllowNoWorker(), dispatcher.WithCallID("late"), dispatcher.WithTimeout(time.Minute))
	if err != nil || !r.IsError {
		t.Fatalf("Call = %+v, %v; want an overloaded result and no error", r, err)
	}
	wantOverloaded(t, "Call", r.Error, "bound of 3 calls")

	if st, err := e.d.Status(t.Context(), "late"); err != nil || st.State != dispatcher.StateUnknown {
		t.Errorf("Status(late) = %+v, %v; want unknown: nothing of a refused call is stored", st, err)
	}
	if n, _ := queued(t, js); n != 3 {
		t.Errorf("calls stream holds %d messages; want the 3 accepted", n)
	}

	// A worker takes the queued calls; then the refused id is a new call.
	e.StartWorker(worker.Config{}, greet())
	fleettest.WaitFor(t, 10*time.Second, "the queued calls run", func() bool { n, _ := queued(t, js); return n == 0 })
	r, err = e.d.Call(t.Context(), "greet", args, dispatcher.WithCallID("late"))
	if err != nil || r.IsError || r.Content != "hello ada" {
		t.Fatalf("Call(late) once there is room = %+v, %v; want hello ada", r, err)
	}
}

// TestDispatcherBoundsAnExistingCallsStream: a calls stream created
// before streams had a bound (no MaxMsgs, discard old) holding 5 queued
// calls gets the bound of a dispatcher started with one (logged at info),
// which drops none of them but refuses the next call; other processes
// (EnsureStreams with the defaults, a dispatcher given no bound) leave the
// bound as it is; a dispatcher started with limits.NoLimit unbounds the
// stream again.
func TestDispatcherBoundsAnExistingCallsStream(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	js := f.JetStream()
	legacy := layout.CallsConfig(layout.StreamOptions{})
	legacy.MaxMsgs, legacy.Discard = -1, jetstream.DiscardOld
	if _, err := js.CreateStream(t.Context(), legacy); err != nil {
		t.Fatal(err)
	}
	e := &env{Fleet: f, t: t}
	e.d = f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: limits.NoLimit}})
	if _, cfg := queued(t, js); cfg.MaxMsgs != -1 || cfg.Discard != jetstream.DiscardOld {
		t.Fatalf("a dispatcher with no bound changed an unbounded stream: MaxMsgs %d, %s", cfg.MaxMsgs, cfg.Discard)
	}
	e.advertiseUnserved(greet().Spec())
	args := map[string]any{"name": "ada"}
	for range 5 {
		if _, err := e.d.Submit(t.Context(), "greet", args, dispatcher.AllowNoWorker()); err != nil {
			t.Fatal(err)
		}
	}

	var logs testserver.Buffer
	bounded := f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: 3}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	n, cfg := queued(t, js)
	if cfg.MaxMsgs != 3 || cfg.Discard != jetstream.DiscardNew || n != 5 {
		t.Fatalf("after a dispatcher bounded to 3: MaxMsgs %d, %s, %d messages; want 3, DiscardNew and the 5 queued calls kept", cfg.MaxMsgs, cfg.Discard, n)
	}
	if l := logs.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, "bounded the calls stream") ||
		!strings.Contains(l, "max_msgs_was=-1 max_msgs=3 discard_was=DiscardOld discard=DiscardNew") {
		t.Errorf("log = %q; want the change at info", l)
	}
	fleettest.WaitFor(t, 5*time.Second, "the tool in the bounded dispatcher's view", func() bool { _, err := bounded.Tool("greet"); return err == nil })
	_, err := bounded.Submit(t.Context(), "greet", args, dispatcher.AllowNoWorker())
	wantOverloaded(t, "Submit over a lowered bound", err, "bound of 3 calls")

	// A worker or the approval service ensures the streams with the
	// defaults, and a dispatcher given no bound (a CLI command) starts:
	// an existing stream keeps its bound.
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	f.Dispatcher(dispatcher.Config{})
	if _, cfg := queued(t, js); cfg.MaxMsgs != 3 {
		t.Errorf("EnsureStreams with the defaults, or a dispatcher with no bound, changed the bound to %d", cfg.MaxMsgs)
	}

	f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: limits.NoLimit}})
	if _, cfg := queued(t, js); cfg.MaxMsgs != -1 {
		t.Fatalf("after a dispatcher with limits.NoLimit: MaxMsgs %d; want -1", cfg.MaxMsgs)
	}
	if _, err := e.d.Submit(t.Context(), "greet", args, dispatcher.AllowNoWorker()); err != nil {
		t.Fatalf("Submit to an unbounded stream: %v", err)
	}
}

// TestDefaultCallsBound: a dispatcher given no bound creates the calls
// stream with limits.DefaultMaxQueuedCalls, discard new, and a
// negative bound other than limits.NoLimit is refused at New.
func TestDefaultCallsBound(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	f.Dispatcher(dispatcher.Config{})
	if _, cfg := queued(t, f.JetStream()); cfg.MaxMsgs != limits.DefaultMaxQueuedCalls || cfg.Discard != jetstream.DiscardNew {
		t.Errorf("calls stream: MaxMsgs %d, %s; want %d, DiscardNew", cfg.MaxMsgs, cfg.Discard, limits.DefaultMaxQueuedCalls)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := dispatcher.New(ctx, dispatcher.Config{Conn: f.Conn(), Registry: f.Registry(), Limits: limits.Config{MaxQueuedCalls: -2}}); err == nil || !strings.Contains(err.Error(), "max_queued_calls") {
		t.Errorf("New with Limits.MaxQueuedCalls -2 = %v; want an error naming max_queued_calls", err)
	}
}
