package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
)

// TestStatusAndCancelWhenStreamsCannotBeRead asks about an accepted call
// while the fleet's streams cannot say: Status and Cancel fail with
// ErrUnavailable, never StateUnknown or ErrUnknownCall, which would tell
// the caller the call was lost. First only the events stream is gone (the
// results stream answers "no result"), as when a restarted server has
// recovered one stream and not the other yet; then the NATS server is
// down. An id never submitted is unknown while the streams are readable.
func TestStatusAndCancelWhenStreamsCannotBeRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.advertiseUnserved(greet().Spec())
	// No worker pulls it: the call stays queued.
	id, err := e.d.Submit(t.Context(), "greet", map[string]any{"name": "ada"}, dispatcher.AllowNoWorker())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.d.Status(t.Context(), id); err != nil || st.State != dispatcher.StateQueued {
		t.Fatalf("Status(%s) = %+v, %v; want queued", id, st, err)
	}
	if st, err := e.d.Status(t.Context(), "never-submitted"); err != nil || st.State != dispatcher.StateUnknown {
		t.Errorf("Status(never-submitted) = %+v, %v; want unknown", st, err)
	}
	if err := e.d.Cancel(t.Context(), "never-submitted", "why"); !errors.Is(err, dispatcher.ErrUnknownCall) {
		t.Errorf("Cancel(never-submitted) = %v; want ErrUnknownCall", err)
	}

	unreadable := func(phase string, cancelToo bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		st, err := e.d.Status(ctx, id)
		if err == nil || !errors.Is(err, dispatcher.ErrUnavailable) {
			t.Errorf("%s: Status(%s) = %+v, %v; want ErrUnavailable", phase, id, st, err)
		}
		if !cancelToo {
			return
		}
		if err := e.d.Cancel(ctx, id, "why"); !errors.Is(err, dispatcher.ErrUnavailable) || errors.Is(err, dispatcher.ErrUnknownCall) {
			t.Errorf("%s: Cancel(%s) = %v; want ErrUnavailable", phase, id, err)
		}
	}

	// Status reads the call's events; Cancel of an ungated call does not
	// need them (its record is the call's message).
	js := e.JetStream()
	if err := js.DeleteStream(t.Context(), layout.EventsStream); err != nil {
		t.Fatal(err)
	}
	unreadable("the events stream gone", false)
	if err := layout.EnsureStreams(t.Context(), js, layout.EventsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	// The call's record is its message in the calls stream: with the
	// stream not there (not recovered yet), neither can say "unknown".
	if err := js.DeleteStream(t.Context(), layout.CallsStream); err != nil {
		t.Fatal(err)
	}
	unreadable("the calls stream gone", true)
	if err := layout.EnsureStreams(t.Context(), js, layout.CallsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}

	e.NATS.Stop()
	unreadable("the NATS server down", true)
}

// TestForeignMessageOnACallsSubject: a message of another id on a call's
// subject (a forgery stored first, or a token collision) does not hide the
// call: Status finds it queued and Cancel cancels it, never "unknown".
func TestForeignMessageOnACallsSubject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.advertiseUnserved(greet().Spec())
	js := e.JetStream()
	for i := range 3 { // on a tool nobody serves, so they stay
		if _, err := js.Publish(t.Context(), layout.CallSubject("ghost", "victim"), fmt.Appendf(nil, `{"id":"squatter-%d","name":"ghost"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	id, err := e.d.Submit(t.Context(), "greet", map[string]any{"name": "ada"}, dispatcher.AllowNoWorker(), dispatcher.WithCallID("victim"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.d.Status(t.Context(), id); err != nil || st.State != dispatcher.StateQueued || st.Tool != "greet" {
		t.Errorf("Status(%s) = %+v, %v; want queued, tool greet", id, st, err)
	}
	if err := e.d.Cancel(t.Context(), id, "not needed"); err != nil {
		t.Errorf("Cancel(%s) = %v; want it canceled", id, err)
	}
}
