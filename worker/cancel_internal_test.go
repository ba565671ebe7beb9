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
// stream's state when it starts, from a record's pending count when it
// receives one, and from a probe when it receives none.
func TestFollowerKnowsHowFarItCaughtUp(t *testing.T) {
	t.Parallel()
	nc := testserver.StartNATS(t).Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.CancelsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
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

	// A cancellation arrives: applied, and caught up as of its arrival.
	sent := time.Now()
	data, _ := json.Marshal(windlass.Cancellation{CallID: "c1", Reason: "test", At: time.Now()})
	if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: layout.CancelSubject("c1"), Data: data}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower caught up after the cancellation", func() bool {
		c.mu.Lock()
		_, applied := c.canceled[layout.CallToken("c1")]
		c.mu.Unlock()
		return applied && c.caughtUpRecently(time.Since(sent))
	})

	// Nothing new arrives: the proof ages, and a probe renews it.
	asked := time.Now()
	waitFor(t, "the proof grown older than the time since asked", func() bool {
		return !c.caughtUpRecently(time.Since(asked) / 2)
	})
	c.probeSoon()
	waitFor(t, "a probe renewed the proof", func() bool {
		return c.caughtUpRecently(time.Since(asked))
	})
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
