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
// the cancels stream says it has caught up past a time only when every
// cancellation stored before it is applied — from the stream's state when
// it starts, from a record's pending count when it receives one, and from
// a probe when it receives none.
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
	before := time.Now().Add(-time.Second)
	c := newCancellations()
	stop, err := c.follow(t.Context(), js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !c.caughtUpPast(before) {
		t.Error("an empty stream at the start: not caught up past a time before it")
	}
	later := time.Now().Add(time.Hour)
	if c.caughtUpPast(later) {
		t.Fatal("caught up past a time to come")
	}

	// A cancellation arrives: applied, and everything before it with it.
	data, _ := json.Marshal(windlass.Cancellation{CallID: "c1", Reason: "test", At: time.Now()})
	ack, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: layout.CancelSubject("c1"), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := js.Stream(t.Context(), layout.CancelsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stored.GetMsg(t.Context(), ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower caught up past the cancellation", func() bool {
		return c.caughtUpPast(m.Time)
	})
	if _, ok := c.canceled[layout.CallToken("c1")]; !ok {
		t.Error("caught up past a cancellation it has not applied")
	}

	// Nothing new arrives: a probe moves it on to the server's now.
	past := time.Now()
	if c.caughtUpPast(past) {
		t.Fatal("caught up past now without a record or a probe")
	}
	c.probeSoon()
	waitFor(t, "a probe moved the follower past now", func() bool {
		return c.caughtUpPast(past)
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
