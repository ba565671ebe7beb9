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
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestAHoldersAnswerJustPastTheDeadlineIsNotBeatenByATimeout: a call held
// by a worker cut off by an outage is redelivered, within the settle
// window of the new worker's reconnect, a moment before its deadline. Its
// holder ran it and answers just after the deadline, still within the
// window. The waiting worker must not answer "timeout ... before a worker
// took it" at the deadline (the tool did run; the first answer wins, so
// the holder's real answer is then dropped): past the deadline the call
// cannot run again anyway, so nothing is gained by cutting the wait short.
func TestAHoldersAnswerJustPastTheDeadlineIsNotBeatenByATimeout(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-near-deadline"
	deadline := time.Now().Add(8 * time.Second)
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Deadline: deadline, Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	var runs atomic.Int64
	logs := &logLines{}
	b.reconnectedWorker(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)
	if !time.Now().Before(deadline) {
		t.Skip("the machine was too slow: the deadline passed before the redelivery")
	}
	// The holder, back on its connection, answers just after the deadline
	// (well within the worker's 20.5 s settle window).
	time.Sleep(time.Until(deadline) + 300*time.Millisecond)
	ack := b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})

	b.callGone("echo", seq)
	if ack.Duplicate {
		t.Errorf("the holder's answer was dropped as a duplicate: another answer was stored first")
	}
	if r, ok := b.storedResult(id); !ok || r.Content != "the holder's answer" {
		t.Errorf("stored answer %v %q (found %v); want the holder's: the tool ran on the holder", r.Code(), r.Content, ok)
	}
}

// TestAShutdownGraceEndingInTheSettleWindowDoesNotRunTheCall: a worker
// waits, in the settle window of its reconnect, for the answer of a call
// held elsewhere, and is stopped with a short shutdown grace. When the
// grace ends during the wait, the call must be handed back (as
// untilAnswered does when the worker's context ends), not run on a
// context already canceled: a tool that does not watch its context runs
// its effects a second time.
func TestAShutdownGraceEndingInTheSettleWindowDoesNotRunTheCall(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "held-at-shutdown"
	b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})
	holder := b.hold(cons)
	var runs atomic.Int64
	logs := &logLines{}
	stop := b.reconnectedWorkerWithStop(cons, worker.Config{Logger: slog.New(logs), ShutdownGrace: 300 * time.Millisecond}, countingEcho(&runs))
	b.redeliverWhileHeld(holder, logs, &runs)
	stop() // Run's context ends; the grace (300 ms) ends long before the 20.5 s window
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times while the worker shut down; its holder may still answer it", n)
	}
}

// TestAReleaseApprovedUnderAHigherBoundIsAnsweredSpecMismatch: a call
// approved while its tool took 10 JSON values (the release signs that
// spec's hash), run by a worker of the tool redeployed with a bound of 3.
// The tool changed: the caller is told spec_mismatch, as before
// AuthenticateWithin. It must not be dropped as args_mismatch ("not the
// ones approved": they are) and left unanswered.
func TestAReleaseApprovedUnderAHigherBoundIsAnsweredSpecMismatch(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t, windlass.WithMaxArgumentValues(3))
	old := countingEcho(new(atomic.Int64), windlass.WithApproval(), windlass.WithMaxArgumentValues(10)).Spec()
	args := json.RawMessage(`{"text":"pay bob","memo":"x","note":"y"}`) // 4 values: within the old bound
	hash, err := release.ArgumentsHash(args)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := g.signer.Sign(release.Release{CallID: "pay-old-spec", Tool: "echo", SpecHash: old.Hash(), ArgsHash: hash,
		ExpiresAt: time.Now().Add(time.Minute), ApprovedBy: []string{"alice"}, Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(windlass.ToolCall{ID: "pay-old-spec", Name: "echo", Arguments: args, SpecHash: old.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	g.publishGated(body, hdr, g.signer.MessageID("pay-old-spec"))
	select {
	case r := <-g.results:
		if r.Code() != windlass.CodeSpecMismatch {
			t.Errorf("answered %v %q; want spec_mismatch", r.Code(), r.Content)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the approved call was not answered (logged args_mismatch refusal: %v)", g.logged("refus"))
	}
	if n := g.runs.Load(); n != 0 {
		t.Errorf("the gated tool ran %d times", n)
	}
}

// reconnectedWorkerWithStop is reconnectedWorker, also returning the
// worker's stop.
func (b *bench) reconnectedWorkerWithStop(cons jetstream.Consumer, cfg worker.Config, tool windlass.Tool) (stop func()) {
	b.t.Helper()
	nc := b.nats.Connect(b.t, nats.ReconnectWait(20*time.Second))
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	cfg.JetStream = js
	_, stop = b.start(cfg, tool)
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
	return stop
}
