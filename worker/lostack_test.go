package worker_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/worker"
)

// TestALostAckKeepsTheStoredResultsObjects: a result over the inline
// limit goes to the payloads bucket, its message by reference; the results
// stream stores it and its acknowledgement is lost (a reply lost in a NATS
// restart or a leader change), so the worker publishes the same message
// again and the stream answers "duplicate" — of this very answer. The
// objects it points at are the stored answer's, and stay: every reader
// gets the tool's text, and no duplicate answer is counted. Before, the
// duplicate was taken for another attempt's answer and its objects were
// deleted: the tool succeeded once and every reader was told
// payload_unreadable. (Found by a review helper.)
func TestALostAckKeepsTheStoredResultsObjects(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	dropper := &fleettest.AckDropper{Stream: layout.ResultsStream}
	dropper.Arm()
	js, err := jetstream.New(b.nats.Connect(t, nats.SetCustomDialer(dropper)))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	w, _ := b.start(worker.Config{JetStream: js, InlineLimit: 1 << 10}, countingEcho(&runs))
	text := strings.Repeat("x", 8<<10) // over the inline limit: by reference
	b.publish(windlass.ToolCall{ID: "lost-ack", Name: "echo", Arguments: json.RawMessage(`{"text":"` + text + `"}`)})
	if first := b.result(10 * time.Second); first.ContentRef == nil && first.DataRef == nil {
		t.Fatalf("the result went inline (%.100q); the test needs it by reference", first.Content)
	}
	// The asynchronous publish gives up on its acknowledgement and the
	// answer is published again.
	fleettest.WaitFor(t, 30*time.Second, "the call concluded", func() bool { return w.Stats().Completed+w.Stats().Failed == 1 })
	if !dropper.Dropped() {
		t.Fatal("no acknowledgement was dropped")
	}
	b.consumerSettled("echo")

	stored, ok := b.storedResult("lost-ack")
	if !ok {
		t.Fatal("no stored result")
	}
	obs, err := layout.EnsurePayloads(t.Context(), b.js, layout.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := payload.New(obs, b.nats.Connect(t)).Resolve(t.Context(), stored, 1<<20)
	if err != nil || got.IsError || got.Content != text {
		t.Errorf("the stored answer resolves to %.300q (code %q), %v; want the tool's text: it succeeded once", got.Content, got.Code(), err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	if s := w.Stats(); s.DuplicateResults != 0 || s.Completed != 1 {
		t.Errorf("stats %+v; want 1 completed, no duplicate answer: the duplicate was this answer", s)
	}
}

// TestARedeliveryJustAfterAReconnectWaitsForItsHoldersAnswer: a call is
// held by a worker cut off by an outage (here the test's own pull, which
// hands it back), and the worker that gets it again has just reconnected
// itself: the holder's answer, stored a moment later, is the call's, and
// the second worker acks the call unrun. Before, it ran the call at once
// on finding no answer: a NATS restart made tools run again (the fault
// suite's "re-executed").
func TestARedeliveryJustAfterAReconnectWaitsForItsHoldersAnswer(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-elsewhere"
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	holder, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("the holder got no delivery (%v)", batch.Error())
	}

	// The second worker's connection comes back (a long reconnect delay, so
	// that its settle window outlasts a loaded machine's pauses).
	var runs atomic.Int64
	nc := b.nats.Connect(t, nats.ReconnectWait(20*time.Second))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	w, _ := b.start(worker.Config{JetStream: js, Logger: slog.New(logs)}, countingEcho(&runs))
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the worker reconnected and pulling", func() bool {
		if nc.Stats().Reconnects == 0 || !nc.IsConnected() {
			return false
		}
		info, err := cons.Info(t.Context())
		return err == nil && info.NumWaiting > 0
	})

	// The call comes to it again while the holder's answer is on its way.
	if err := holder.Nak(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the worker looked for the call's answer and found none", func() bool {
		return logs.contains("may still hold it") || runs.Load() > 0
	})
	b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})

	b.callGone("echo", seq)
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times; its holder answered it", n)
	}
	if s := w.Stats(); s.AlreadyAnswered != 1 {
		t.Errorf("stats %+v; want the redelivery acked as already answered", s)
	}
	if r, ok := b.storedResult(id); !ok || r.Content != "the holder's answer" {
		t.Errorf("stored answer %+v (found %v); want the holder's", r, ok)
	}
}
