package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
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
	_, ok := c.lookedUp(layout.CallToken(callID))
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

// TestCallsThatWaitedShareAProbe: calls that waited in the queue while
// the follower's proof was stale wait for one probe of the stream and
// are answered from what the follower applied — the canceled one
// canceled, the others not — without a look-up each. Before, each was
// looked up in the stream.
func TestCallsThatWaitedShareAProbe(t *testing.T) {
	t.Parallel()
	js := cancelsStream(t)
	w, lookups := followingWorker(t, js, nil)
	storeCancellation(t, js, "gone")
	waitFor(t, "the cancellation applied", func() bool { return w.cancels.has("gone") })
	since := time.Now()
	waitFor(t, "the follower's proof stale", func() bool {
		return !w.cancels.caughtUpRecently(time.Since(since)) && time.Since(since) > cancelCheckAfter
	})

	ids := []string{"gone", "here-1", "here-2", "here-3", "here-4", "here-5", "here-6", "here-7"}
	canceled := make([]bool, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { _, canceled[i] = w.canceledWhileQueued(waited(id)) })
	}
	wg.Wait()
	for i, id := range ids {
		if canceled[i] != (id == "gone") {
			t.Errorf("%s: canceled = %v", id, canceled[i])
		}
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("%d calls looked up in the stream; want none: the probe proved the follower caught up", n)
	}
}

// TestAFollowerBehindLeavesTheLookUp: when the probe finds the follower
// behind (a cancellation stored, not applied yet), the call is looked up
// in the stream, and its cancellation is found there.
func TestAFollowerBehindLeavesTheLookUp(t *testing.T) {
	t.Parallel()
	js := cancelsStream(t)
	held := make(chan struct{})
	defer close(held)
	w, lookups := followingWorker(t, js, func(subject string) {
		if subject == layout.CancelSubject("behind") {
			<-held // not applied while the test runs
		}
	})
	since := time.Now()
	storeCancellation(t, js, "behind")
	waitFor(t, "the follower's proof stale", func() bool {
		return !w.cancels.caughtUpRecently(time.Since(since)) && time.Since(since) > cancelCheckAfter
	})
	if _, canceled := w.canceledWhileQueued(waited("behind")); !canceled {
		t.Error("a call canceled while the follower was behind: not canceled")
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d look-ups; want 1", n)
	}
}

// followingWorker is a worker whose cancellations follow js's cancels
// stream, with delivered as their test hook, and the count of its
// look-ups in that stream.
func followingWorker(t *testing.T, js jetstream.JetStream, delivered func(string)) (*Worker, *atomic.Int64) {
	t.Helper()
	w, err := New(Config{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), layout.CancelsStream)
	if err != nil {
		t.Fatal(err)
	}
	counted := &lookupCounter{Stream: stream}
	w.cancelsStream = counted
	w.cancels.delivered = delivered
	stop, err := w.cancels.follow(t.Context(), js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return w, &counted.n
}

// lookupCounter is the real cancels stream, counting the look-ups of a
// call's cancellation made through it (what the test asserts on; every
// call goes to the server).
type lookupCounter struct {
	jetstream.Stream
	n atomic.Int64
}

func (s *lookupCounter) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	s.n.Add(1)
	return s.Stream.GetLastMsgForSubject(ctx, subject)
}

// waited is the delivery of call id, published a second ago.
func waited(id string) *delivery {
	return &delivery{ctx: context.Background(), token: layout.CallToken(id), call: windlass.ToolCall{ID: id},
		meta: &jetstream.MsgMetadata{Timestamp: time.Now().Add(-time.Second)}}
}
