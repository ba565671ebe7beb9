package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
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

// lockedBuffer is a log sink the worker's goroutines and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lateAcks is a worker whose in-progress acknowledgements never go out, so
// its calls are redelivered every ack wait (500 ms, unless the Config sets
// one) to it, the only worker: the heartbeat period is set to an hour after
// the config was checked (internal). The real cause, acks queued on the connection behind
// a large upload on a loaded machine, cannot be had on demand from a real
// server.
type lateAcks struct {
	w       *Worker
	js      jetstream.JetStream
	logs    *lockedBuffer
	results chan windlass.ToolResult
}

// startLateAcks runs such a worker with cfg and tool until the test ends.
func startLateAcks(t *testing.T, cfg Config, tool windlass.Tool, opts ...ToolOption) *lateAcks {
	t.Helper()
	nc := testserver.StartNATS(t).Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	la := &lateAcks{js: js, logs: &lockedBuffer{}, results: make(chan windlass.ToolResult, 4)}
	cfg.JetStream, cfg.AckWait, cfg.Logger = js, cmp.Or(cfg.AckWait, 500*time.Millisecond), slog.New(slog.NewTextHandler(la.logs, nil))
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Heartbeat = time.Hour // no in-progress ack goes out
	la.w = w
	if err := w.Register(tool, opts...); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(layout.ResultInbox("held-test"), func(m *nats.Msg) {
		var r windlass.ToolResult
		if json.Unmarshal(m.Data, &r) == nil {
			la.results <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		_ = sub.Unsubscribe()
	})
	name := tool.Spec().Name
	waitFor(t, "the worker's consumer created", func() bool {
		_, err := js.Consumer(t.Context(), layout.CallsStream, layout.ConsumerName(name))
		return err == nil
	})
	return la
}

// publish queues a call of tool with id, answered to the test.
func (la *lateAcks) publish(t *testing.T, tool, id string) {
	t.Helper()
	data, _ := json.Marshal(windlass.ToolCall{ID: id, Name: tool, Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	msg := &nats.Msg{Subject: layout.CallSubject(tool, id), Data: data, Header: nats.Header{layout.HeaderOrigin: []string{"held-test"}}}
	if _, err := la.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// left counts the deliveries the worker left alone.
func (la *lateAcks) left() int64 { return la.w.Stats().LeftAlone }

// answer waits for the call's answer.
func (la *lateAcks) answer(t *testing.T, within time.Duration) windlass.ToolResult {
	t.Helper()
	select {
	case r := <-la.results:
		return r
	case <-time.After(within):
		t.Fatalf("no answer within %s", within)
		return windlass.ToolResult{}
	}
}

// blockingTool is the tool "held", which counts its runs and answers "done
// by attempt N" once unblock is called (again is harmless).
func blockingTool() (tool windlass.Tool, runs *atomic.Int64, unblock func()) {
	runs = new(atomic.Int64)
	release := make(chan struct{})
	var once sync.Once
	tool = windlass.MustFunc("held", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		runs.Add(1)
		<-release
		return "done by attempt " + strconv.Itoa(info.Attempt), nil
	})
	return tool, runs, func() { once.Do(func() { close(release) }) }
}

// TestRedeliveryToTheHoldingWorkerDoesNotRunAgain: a call whose in-progress
// acknowledgements stop reaching the server is redelivered after the ack
// wait, and JetStream may hand it back to the worker that still runs it.
// That worker does not run it a second time: its tool runs once, the
// redelivery leaves the message unsettled, and the first delivery's
// answer settles it.
func TestRedeliveryToTheHoldingWorkerDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	tool, runs, unblock := blockingTool()
	defer unblock()
	la := startLateAcks(t, Config{}, tool)
	la.publish(t, "held", "held-1")
	waitFor(t, "the tool started", func() bool { return runs.Load() == 1 })
	waitFor(t, "the call redelivered to its worker and left there, or run again", func() bool {
		return runs.Load() > 1 || la.left() > 0
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want once, the redelivery left to the delivery the worker holds", n)
	}
	if n := callsStored(t, la.js); n != 1 {
		t.Fatalf("the calls stream holds %d messages after a delivery was left alone; want the call's, unsettled", n)
	}
	if !strings.Contains(la.logs.String(), "redelivered to the worker still holding it") {
		t.Errorf("no warning of the delivery left alone in the worker's log:\n%s", la.logs)
	}
	unblock()
	if r := la.answer(t, 10*time.Second); r.IsError || r.Content != "done by attempt 1" || r.Attempt != 1 {
		t.Fatalf("answer %q (attempt %d, error %v); want the first delivery's", r.Content, r.Attempt, r.IsError)
	}
	waitFor(t, "the call's message settled by the first delivery's ack", func() bool { return callsStored(t, la.js) == 0 })
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times in all; want once", n)
	}
}

// callsStored is how many messages the calls stream holds.
func callsStored(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestLeftDeliveriesDoNotBuryARetry: deliveries left alone while a call
// ran count as attempts (an attempt is a delivery), and a retryable
// failure of the delivery that holds the call is answered with its error
// once no delivery is left for a retry — not handed back into a delivery
// past the bound, which answers worker_lost without running, as if every
// worker that took the call had been lost.
func TestLeftDeliveriesDoNotBuryARetry(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	var la *lateAcks
	ready := make(chan struct{})
	tool := windlass.MustFunc("flaky", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		<-ready
		for la.left() < 2 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return "", windlass.Retryable(errors.New("transient trouble"))
	})
	la = startLateAcks(t, Config{MaxDeliver: 3}, tool, WithRetry(RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond}))
	close(ready)
	la.publish(t, "flaky", "flaky-1")
	if r := la.answer(t, 20*time.Second); r.Code() == windlass.CodeWorkerLost || !strings.Contains(r.Content, "transient trouble") {
		t.Errorf("answer %s: %q; want the tool's own error, its retries used up by the deliveries left alone", r.Code(), r.Content)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once", n)
	}
}

// TestShutdownLeavesAHeldRedeliveryAlone: a call pulled once the worker
// is shutting down is handed back to the stream for another worker, except
// a redelivery of a call this worker still runs: handed back, it would run
// on another worker beside the first. That delivery is left alone — no
// other worker is given the call, the tool runs once, and the first
// delivery's answer settles the message.
//
// The shutdown branch of puller.take is driven directly, with a real
// redelivery: a worker shutting down takes a pulled call there only when
// its context ends between the server's sending the call and the puller's
// reading it, a moment a test cannot choose with real servers. The tool
// runs one call at a time, so while it runs the worker has no pull request
// open and the redelivery (its acks are late: ack wait 6 s) comes to the
// test's own pull on the worker's consumer.
func TestShutdownLeavesAHeldRedeliveryAlone(t *testing.T) {
	t.Parallel()
	// Long enough that a stall of the test under load does not bring the
	// next redelivery into the 1 s look for a handed-back call.
	const ackWait = 6 * time.Second
	tool, runs, unblock := blockingTool()
	defer unblock()
	la := startLateAcks(t, Config{AckWait: ackWait}, tool, WithConcurrency(1))
	cons, err := la.js.Consumer(t.Context(), layout.CallsStream, layout.ConsumerName("held"))
	if err != nil {
		t.Fatal(err)
	}
	// pull pulls one delivery of the tool's calls, as another worker would.
	pull := func(within time.Duration) (jetstream.Msg, bool) {
		t.Helper()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(within))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			return msg, true
		}
		return nil, false
	}
	la.publish(t, "held", "held-1")
	waitFor(t, "the tool started", func() bool { return runs.Load() == 1 })
	redelivery, ok := pull(3 * ackWait)
	if !ok {
		t.Fatalf("the call was not redelivered within %s", 3*ackWait)
	}
	if meta, err := redelivery.Metadata(); err != nil || meta.NumDelivered != 2 {
		t.Fatalf("pulled %v, %v; want the call's second delivery", meta, err)
	}

	// The worker's puller, shutting down, with the slots it reserved for
	// the pull that brought the redelivery.
	shutdown, stop := context.WithCancel(t.Context())
	stop()
	p := &puller{w: la.w, ctx: shutdown, stopped: shutdown, runCtx: t.Context(), t: la.w.tools["held"], calls: new(sync.WaitGroup), log: la.w.cfg.Logger, toolSlots: make(chan struct{}, 1)}
	p.toolSlots <- struct{}{}
	la.w.slots <- struct{}{}
	p.take(redelivery)

	if n := la.left(); n != 1 {
		t.Errorf("Stats().LeftAlone = %d after the redelivery was taken while shutting down; want 1", n)
	}
	// Handed back, it would come again at once; left alone, not before
	// another ack wait.
	if again, ok := pull(time.Second); ok {
		meta, _ := again.Metadata()
		t.Fatalf("the call was delivered again (delivery %d) right after the shutting-down worker took its redelivery: handed back, to run beside the first", meta.NumDelivered)
	}
	if len(p.toolSlots) != 0 {
		t.Error("the slot reserved for the redelivery was not given back")
	}
	unblock()
	if r := la.answer(t, 10*time.Second); r.IsError || r.Content != "done by attempt 1" {
		t.Fatalf("answer %q (error %v); want the first delivery's", r.Content, r.IsError)
	}
	waitFor(t, "the call's message settled by the first delivery's ack", func() bool { return callsStored(t, la.js) == 0 })
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once", n)
	}
}
