package worker_test

import (
	"encoding/json"
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
