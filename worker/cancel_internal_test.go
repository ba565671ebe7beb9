package worker

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestFollowerKnowsHowFarItCaughtUp checks what lets a worker skip the
// cancellation look-up of a call that waited in the queue: the follower of
// the cancels stream says it is caught up only for a short while after it
// learned that every cancellation stored by then was applied — from the
// stream's state when it starts, and from a probe of the stream after.
func TestFollowerKnowsHowFarItCaughtUp(t *testing.T) {
	t.Parallel()
	js := cancelsStream(t)
	c := newCancellations()
	if c.caughtUpRecently(time.Hour) {
		t.Fatal("caught up before following")
	}
	started := time.Now()
	stop, err := c.follow(t.Context(), js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !c.caughtUpRecently(time.Since(started)) {
		t.Error("an empty stream at the start: not caught up")
	}

	// A cancellation arrives and is applied; the proof ages, and a probe
	// renews it past the cancellation.
	sent := time.Now()
	storeCancellation(t, js, "c1")
	waitFor(t, "the cancellation applied", func() bool { return c.has("c1") })
	waitFor(t, "the proof grown older than the cancellation", func() bool {
		return !c.caughtUpRecently(time.Since(sent))
	})
	asked := time.Now()
	c.probeSoon()
	waitFor(t, "a probe renewed the proof", func() bool {
		return c.caughtUpRecently(time.Since(asked))
	})
}

// TestARecordHandledLateVouchesForNoLaterOne: a cancellation stored
// while the follower is behind — after the server delivered the record
// before it, before the follower handled that record — is not taken for
// applied. Before, a record delivered with nothing pending marked the
// follower caught up as of the moment it was handled, so a call pulled
// then skipped its look-up and ran although its cancellation was stored.
func TestARecordHandledLateVouchesForNoLaterOne(t *testing.T) {
	t.Parallel()
	js := cancelsStream(t)
	c := newCancellations()
	var storedLate time.Time // when the cancellation of "late" was certainly stored
	checked := make(chan struct{})
	c.delivered = func(subject string) {
		switch subject {
		case layout.CancelSubject("first"):
			// Delivered with nothing pending; before it is handled, another
			// cancellation is stored.
			storeCancellation(t, js, "late")
			storedLate = time.Now()
		case layout.CancelSubject("late"):
			<-checked // not applied until the test has looked
		}
	}
	stop, err := c.follow(t.Context(), js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(checked); stop() }()
	storeCancellation(t, js, "first")
	waitFor(t, "the first cancellation applied", func() bool { return c.has("first") })
	if c.has("late") {
		t.Fatal("the late cancellation applied before the test looked")
	}
	if c.caughtUpRecently(time.Since(storedLate)) {
		t.Fatal("the follower says every cancellation stored by now is applied; the late one, stored before, is not")
	}
}

// cancelsStream starts a NATS server with the cancels stream.
func cancelsStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(testserver.StartNATS(t).Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.CancelsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	return js
}

// storeCancellation stores a cancellation of callID in the cancels stream.
func storeCancellation(t *testing.T, js jetstream.JetStream, callID string) {
	t.Helper()
	data, _ := json.Marshal(windlass.Cancellation{CallID: callID, Reason: "test", At: time.Now()})
	if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: layout.CancelSubject(callID), Data: data}); err != nil {
		t.Error(err)
	}
}

// has reports whether the cancellation of callID is applied.
func (c *cancellations) has(callID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.canceled[layout.CallToken(callID)]
	return ok
}

// waitFor polls cond until it holds, for at most 10 s (fleettest.WaitFor,
// which this package's internal tests cannot import).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
