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

	link := newCutLink(t, b.nats.URL())
	nc, err := nats.Connect(link.url(), nats.MaxReconnects(-1),
		// A settle window of 10.6 s (the pull request the reconnect cut
		// off may hold the next pull back for 5 s), and quick reconnects
		// once the link is restored.
		nats.ReconnectWait(10*time.Second), nats.CustomReconnectDelay(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	logs := &logLines{}
	w, _ := b.start(worker.Config{JetStream: js, Logger: slog.New(logs)}, countingEcho(&runs))
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the worker reconnected and pulling", func() bool {
		info, err := cons.Info(t.Context())
		return nc.Stats().Reconnects > 0 && nc.IsConnected() && err == nil && info.NumWaiting > 0
	})
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
	b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})
	if err := b.js.Conn().Publish(holder.Reply(), []byte("+ACK")); err != nil {
		t.Fatal(err)
	}
	b.callGone("echo", seq)
	if s := w.Stats(); s.LeftAlone != 1 {
		t.Errorf("stats %+v; want the delivery left to its holder", s)
	}
}
