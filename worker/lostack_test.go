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
	"github.com/windlass-dev/windlass/approval/release"
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
	holder := b.hold(cons)
	var runs atomic.Int64
	logs := &logLines{}
	w, _ := b.reconnectedWorker(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)
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

// TestARedeliveredReleaseJustAfterAReconnectWaitsForItsHoldersAnswer: the
// same for a released call, its release claimed in the ledger by the
// message's holder: the redelivery of that very message waits for the
// holder's answer and is acked unrun, not run a second time.
func TestARedeliveredReleaseJustAfterAReconnectWaitsForItsHoldersAnswer(t *testing.T) {
	t.Parallel()
	g := unstartedGatedBench(t)
	cons := g.createConsumer("echo", 30*time.Second)
	const id = "pay-held"
	args := json.RawMessage(`{"text":"pay bob"}`)
	seq := g.publishGated(callBody(t, id, "echo", args), g.releaseOf(g.signer, id, args), g.signer.MessageID(id))
	holder := g.hold(cons)
	kv, err := layout.EnsureReleases(t.Context(), g.js, layout.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err := release.NewLedger(kv).Claim(t.Context(), id, seq, time.Now().Add(time.Minute)); err != nil || !fresh {
		t.Fatalf("the holder's claim: fresh %v, %v", fresh, err)
	}
	g.w, _ = g.reconnectedWorker(cons, g.workerConfig(), g.tool)
	g.redeliverWhileHeld(holder, g.logs, &g.runs)
	g.publishResult(windlass.ToolResult{CallID: id, Content: "paid by the holder", Attempt: 1, Worker: "holder"})

	g.callGone("echo", seq)
	if n := g.runs.Load(); n != 0 {
		t.Errorf("the gated tool ran %d times; its holder answered it", n)
	}
	if s := g.w.Stats(); s.AlreadyAnswered != 1 {
		t.Errorf("stats %+v; want the redelivery acked as already answered", s)
	}
}

// TestAHoldersAnswerPastTheDeadlineIsNotBeatenByATimeout: the deadline of
// a redelivered call passes while the worker waits for its holder's
// answer, which comes just after it. The wait goes on to the end of the
// settle window: past its deadline the call cannot run again anyway, and
// a timeout answered then ("the call's deadline passed before a worker
// took it") would have been stored first and beaten the holder's real
// answer. (Found by a review helper.)
func TestAHoldersAnswerPastTheDeadlineIsNotBeatenByATimeout(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-near-deadline"
	deadline := time.Now().Add(5 * time.Second)
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Deadline: deadline, Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	var runs atomic.Int64
	logs := &logLines{}
	b.reconnectedWorker(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)
	// The scenario itself: the holder answers once the deadline has passed
	// (within the worker's 20.5 s settle window).
	time.Sleep(time.Until(deadline) + 300*time.Millisecond)
	ack := b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})

	b.callGone("echo", seq)
	if ack.Duplicate {
		t.Errorf("the holder's answer was dropped as a duplicate: another answer was stored first")
	}
	if r, ok := b.storedResult(id); !ok || r.Content != "the holder's answer" {
		t.Errorf("stored answer %v %q (found %v); want the holder's: the tool ran on the holder", r.Code(), r.Content, ok)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
}

// TestAShutdownInTheSettleWindowHandsTheCallBack: a worker waiting for the
// answer of a call held elsewhere is stopped, its shutdown grace (300 ms)
// ending during the wait: the call is handed back, not run on a context
// already canceled (a tool that does not watch its context would run its
// effects a second time). (Found by a review helper.)
func TestAShutdownInTheSettleWindowHandsTheCallBack(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	b.publishSeq(windlass.ToolCall{ID: "held-at-shutdown", Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	var runs atomic.Int64
	logs := &logLines{}
	w, stop := b.reconnectedWorker(cons, worker.Config{Logger: slog.New(logs), ShutdownGrace: 300 * time.Millisecond}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)
	stop() // Run returns once the call is settled
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times while the worker shut down; its holder may still answer it", n)
	}
	if s := w.Stats(); s.Requeued != 1 {
		t.Errorf("stats %+v; want the call handed back", s)
	}
}

// hold pulls the next call from cons as a worker that keeps it would, and
// returns its message.
func (b *bench) hold(cons jetstream.Consumer) jetstream.Msg {
	b.t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		b.t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		b.t.Fatalf("no delivery within 10s (%v)", batch.Error())
	}
	return m
}

// reconnectedWorker starts a worker with cfg and tool whose connection
// has just come back (forced to reconnect, with a long reconnect delay so
// that its settle window outlasts a loaded machine's pauses), pulling from
// cons again.
func (b *bench) reconnectedWorker(cons jetstream.Consumer, cfg worker.Config, tool windlass.Tool) (w *worker.Worker, stop func()) {
	b.t.Helper()
	return b.reconnectedWorkerWaiting(cons, cfg, tool, 20*time.Second)
}

// reconnectedWorkerWaiting is reconnectedWorker with a reconnect delay of
// wait: its settle window is wait and nats.go's jitter plus 0.5 s.
func (b *bench) reconnectedWorkerWaiting(cons jetstream.Consumer, cfg worker.Config, tool windlass.Tool, wait time.Duration) (w *worker.Worker, stop func()) {
	b.t.Helper()
	nc := b.nats.Connect(b.t, nats.ReconnectWait(wait))
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	cfg.JetStream = js
	w, stop = b.start(cfg, tool)
	if err := nc.ForceReconnect(); err != nil {
		b.t.Fatal(err)
	}
	fleettest.WaitFor(b.t, 10*time.Second, "the worker reconnected and pulling", func() bool {
		if nc.Stats().Reconnects == 0 || !nc.IsConnected() {
			return false
		}
		info, err := cons.Info(b.t.Context())
		return err == nil && info.NumWaiting > 0
	})
	return w, stop
}

// redeliverWhileHeld hands the holder's call back, so that it is
// delivered to the worker again while (as far as the worker can tell) its
// holder may still answer it, and waits until the worker has looked for
// that answer and not found it (or, as before, ran the call).
func (b *bench) redeliverWhileHeld(holder jetstream.Msg, logs *logLines, runs *atomic.Int64) {
	b.t.Helper()
	if err := holder.Nak(); err != nil {
		b.t.Fatal(err)
	}
	fleettest.WaitFor(b.t, 10*time.Second, "the worker looked for the call's answer and found none", func() bool {
		return logs.contains("may still hold it") || runs.Load() > 0
	})
}
