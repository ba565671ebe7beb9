package worker_test

import (
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// holderAnswers finishes the call for the test's own hold of it, as a
// live holder would: its answer stored, then its delivery acked (the
// server settles the message by its stream sequence, whichever delivery
// the ack comes from; the hold was handed back by redeliverWhileHeld, so
// the ack goes to its ack subject directly), and checks that the call left
// the work queue.
func (b *bench) holderAnswers(holder jetstream.Msg, id string, seq uint64) {
	b.t.Helper()
	b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})
	if err := b.js.Conn().Publish(holder.Reply(), []byte("+ACK")); err != nil {
		b.t.Fatal(err)
	}
	b.callGone("echo", seq)
}

// heldProber stands in for a live holder of a call: it subscribes to the
// tool's held probes and hands each one to the test, which answers it (or
// not) when the scenario says.
func (b *bench) heldProber(tool string) <-chan *nats.Msg {
	b.t.Helper()
	probes := make(chan *nats.Msg, 8)
	sub, err := b.nats.Connect(b.t).Subscribe(layout.HeldProbeSubject(tool), func(m *nats.Msg) {
		select {
		case probes <- m:
		default:
		}
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return probes
}

// TestAWorkerStoppingInTheSettleWindowStillLeavesTheCallToALiveHolder: a
// worker that took a redelivery in its settle window is stopped, its
// shutdown grace ending during the window, while the call's holder is
// alive and would answer the held probe. The code says "a holder found is
// left the call even if the worker is stopping: handed back, the call
// would be delivered again at once, beside its holder", but the probe was
// never made (the window's end on the call's context returned
// interrupted first), and a probe under way was cut short by the same
// context: the call was handed back, to be delivered again at once to a
// worker outside any settle window, which runs it beside its holder.
func TestAWorkerStoppingInTheSettleWindowStillLeavesTheCallToALiveHolder(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-while-the-asker-stops"
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	probes := b.heldProber("echo")
	var runs atomic.Int64
	logs := &logLines{}
	w, stop := b.reconnectedWorker(cons, worker.Config{Logger: slog.New(logs), ShutdownGrace: 300 * time.Millisecond}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)

	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	var probe *nats.Msg
	select {
	case probe = <-probes:
	case <-stopped:
		t.Fatalf("the worker stopped without asking whether a live worker holds the call (stats %+v)", w.Stats())
	case <-time.After(30 * time.Second):
		t.Fatal("no held probe within 30 s")
	}
	if err := probe.Respond([]byte(`{"worker":"holder"}`)); err != nil {
		t.Fatal(err)
	}
	<-stopped
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
	if s := w.Stats(); s.LeftAlone != 1 || s.Requeued != 0 {
		t.Errorf("stats %+v; want the delivery left to its live holder, not handed back", s)
	}
	// The holder settles the message by its stream sequence.
	b.holderAnswers(holder, id, seq)
}

// TestAHoldersStoredAnswerIsNotRunAgainWhenTheLastLookFails: the holder
// of a redelivered call finishes while the worker that took the
// redelivery asks whether it still holds it: it stores its answer and
// lets go, so the probe goes unanswered, and the worker looks for the
// answer once more before it runs the call. That one look failed (the
// worker's link to NATS dropped again right then, as it may just after an
// outage, or the results stream's leader was being elected) and the call
// ran beside its stored answer: a tool run again because a read failed
// after it answered, which the intake's own look (alreadyAnswered) never
// does — it asks again until the call's deadline or the shutdown.
func TestAHoldersStoredAnswerIsNotRunAgainWhenTheLastLookFails(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "answered-while-cut-off"
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	probes := b.heldProber("echo")

	var runs atomic.Int64
	logs := &logLines{}
	w, link := b.reconnectedWorkerOnLink(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)

	// The holder, finishing while asked: its answer stored, it is silent.
	// The worker's link drops at that moment.
	select {
	case <-probes:
	case <-time.After(30 * time.Second):
		logs.mu.Lock()
		t.Logf("logs: %q", logs.lines)
		logs.mu.Unlock()
		t.Fatalf("no held probe within 30 s (the tool ran %d times)", runs.Load())
	}
	b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})
	link.cut()
	fleettest.WaitFor(t, 30*time.Second, "the worker's last look failed: it runs the call, or asks again", func() bool {
		return runs.Load() > 0 || logs.contains("cannot tell whether the redelivered call was answered")
	})
	link.restore()

	b.callGone("echo", seq)
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times; its holder's answer was stored", n)
	}
	if s := w.Stats(); s.AlreadyAnswered != 1 {
		t.Errorf("stats %+v; want the redelivery acked as already answered", s)
	}
	if r, ok := b.storedResult(id); !ok || r.Content != "the holder's answer" {
		t.Errorf("stored answer %+v (found %v); want the holder's", r, ok)
	}
}

// TestAHolderThatAnswersWithoutItsNameIsLeftTheCall: only a worker that
// holds the message answers a held probe (PROTOCOL.md, Held probes), so a
// reply is what says the message is held; the worker id in it is for the
// logs. A reply that did not name a worker (another implementation of the
// protocol, an empty id, a body that does not decode) was taken as no
// holder at all, and the call ran beside the holder that had just said it
// holds it — without the last look for its answer either.
func TestAHolderThatAnswersWithoutItsNameIsLeftTheCall(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-by-a-nameless-holder"
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	probes := b.heldProber("echo")
	var runs atomic.Int64
	logs := &logLines{}
	w, _ := b.reconnectedWorkerWaiting(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs), 2*time.Second)
	b.redeliverWhileHeld(holder, logs, &runs)
	select {
	case probe := <-probes:
		if err := probe.Respond([]byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no held probe within 30 s (the tool ran %d times)", runs.Load())
	}
	fleettest.WaitFor(t, 10*time.Second, "the delivery left alone, or run", func() bool {
		return w.Stats().LeftAlone > 0 || runs.Load() > 0
	})
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times; a worker answered that it holds the call", n)
	}
	b.holderAnswers(holder, id, seq)
	if s := w.Stats(); s.LeftAlone != 1 {
		t.Errorf("stats %+v; want the delivery left to its holder", s)
	}
}

// TestAHeldProbeLostWithTheAskersLinkIsAskedAgain: the worker that took a
// redelivery in its settle window loses its link to NATS again (as it may
// just after an outage) before the window ends, so its held probe never
// reaches the call's holder, which is alive and would answer. The probe's
// silence was taken for "no holder": once the link was back, the last look
// found no answer (the holder is still running) and the call ran beside
// its holder. A probe made while the asker's own link was down says
// nothing; a reconnect since opens a new settle window, and the probe is
// made again.
func TestAHeldProbeLostWithTheAskersLinkIsAskedAgain(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-while-the-asker-is-cut-off"
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	// The holder, alive and running the call: it answers every probe that
	// reaches it.
	var probed atomic.Int64
	sub, err := b.nats.Connect(t).Subscribe(layout.HeldProbeSubject("echo"), func(m *nats.Msg) {
		probed.Add(1)
		_ = m.Respond([]byte(`{"worker":"holder"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	var runs atomic.Int64
	logs := &logLines{}
	w, link := b.reconnectedWorkerOnLink(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)

	// The worker's link drops in its settle window: its probe, at the
	// window's end, goes nowhere, and so does its last look.
	link.cut()
	fleettest.WaitFor(t, 30*time.Second, "the worker's last look failed: it runs the call, or asks again", func() bool {
		return runs.Load() > 0 || logs.contains("cannot tell whether the redelivered call was answered")
	})
	link.restore()
	fleettest.WaitFor(t, 30*time.Second, "the delivery left alone, or run", func() bool {
		return w.Stats().LeftAlone > 0 || runs.Load() > 0
	})
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times; its holder was alive and answered every probe that reached it (%d)", n, probed.Load())
		logs.mu.Lock()
		t.Logf("logs: %q", logs.lines)
		logs.mu.Unlock()
	}
	b.holderAnswers(holder, id, seq)
	if s := w.Stats(); s.LeftAlone != 1 {
		t.Errorf("stats %+v; want the delivery left to its holder", s)
	}
}
