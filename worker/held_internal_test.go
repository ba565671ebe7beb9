package worker

import (
	"bytes"
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

// TestRedeliveryToTheHoldingWorkerDoesNotRunAgain: a call whose in-progress
// acknowledgements stop reaching the server is redelivered after the ack
// wait, and JetStream may hand it back to the worker that still runs it.
// That worker does not run it a second time: its tool runs once, and the
// first delivery's answer settles the message.
//
// The late acknowledgements are forced by giving the worker a heartbeat
// period of an hour after its config was checked (internal): the real
// cause, acks queued on the connection behind a large upload on a loaded
// machine, cannot be had on demand from a real server.
func TestRedeliveryToTheHoldingWorkerDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	nc := testserver.StartNATS(t).Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.CallsConfig(layout.StreamOptions{}), layout.ResultsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	w, err := New(Config{JetStream: js, AckWait: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Heartbeat = time.Hour // no in-progress ack goes out: the call is redelivered every ack wait
	var runs atomic.Int64
	release := make(chan struct{})
	tool := windlass.MustFunc("held", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		runs.Add(1)
		<-release
		return "done by attempt " + strconv.Itoa(info.Attempt), nil
	})
	if err := w.Register(tool); err != nil {
		t.Fatal(err)
	}
	results := make(chan windlass.ToolResult, 4)
	sub, err := nc.Subscribe(layout.ResultInbox("held-test"), func(m *nats.Msg) {
		var r windlass.ToolResult
		if json.Unmarshal(m.Data, &r) == nil {
			results <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()

	call := windlass.ToolCall{ID: "held-1", Name: "held", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)}
	data, _ := json.Marshal(call)
	waitFor(t, "the worker's consumer created", func() bool {
		_, err := js.Consumer(t.Context(), layout.CallsStream, layout.ConsumerName("held"))
		return err == nil
	})
	msg := &nats.Msg{Subject: layout.CallSubject("held", call.ID), Data: data, Header: nats.Header{layout.HeaderOrigin: []string{"held-test"}}}
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tool started", func() bool { return runs.Load() == 1 })
	waitFor(t, "the call redelivered to its worker and left there, or run again", func() bool {
		return runs.Load() > 1 || strings.Contains(logs.String(), "not running it again")
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; want once, the redelivery left to the delivery the worker holds", n)
	}
	if n := callsStored(t, js); n != 1 {
		t.Fatalf("the calls stream holds %d messages after a delivery was left alone; want the call's, unsettled", n)
	}
	unblock()
	select {
	case r := <-results:
		if r.IsError || r.Content != "done by attempt 1" || r.Attempt != 1 {
			t.Fatalf("answer %q (attempt %d, error %v); want the first delivery's", r.Content, r.Attempt, r.IsError)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
	}
	waitFor(t, "the call's message settled by the first delivery's ack", func() bool {
		c, err := js.Consumer(t.Context(), layout.CallsStream, layout.ConsumerName("held"))
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
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
	nc := testserver.StartNATS(t).Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	w, err := New(Config{JetStream: js, AckWait: 500 * time.Millisecond, MaxDeliver: 3, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Heartbeat = time.Hour // no in-progress ack goes out: the call is redelivered every ack wait
	var runs atomic.Int64
	tool := windlass.MustFunc("flaky", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		for strings.Count(logs.String(), "not running it again") < 2 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return "", windlass.Retryable(errors.New("transient trouble"))
	})
	if err := w.Register(tool, WithRetry(RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond})); err != nil {
		t.Fatal(err)
	}
	results := make(chan windlass.ToolResult, 4)
	sub, err := nc.Subscribe(layout.ResultInbox("held-test"), func(m *nats.Msg) {
		var r windlass.ToolResult
		if json.Unmarshal(m.Data, &r) == nil {
			results <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	waitFor(t, "the worker's consumer created", func() bool {
		_, err := js.Consumer(t.Context(), layout.CallsStream, layout.ConsumerName("flaky"))
		return err == nil
	})
	call := windlass.ToolCall{ID: "flaky-1", Name: "flaky", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)}
	data, _ := json.Marshal(call)
	msg := &nats.Msg{Subject: layout.CallSubject("flaky", call.ID), Data: data, Header: nats.Header{layout.HeaderOrigin: []string{"held-test"}}}
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		if r.Code() == windlass.CodeWorkerLost || !strings.Contains(r.Content, "transient trouble") {
			t.Errorf("answer %s: %q; want the tool's own error, its retries used up by the deliveries left alone", r.Code(), r.Content)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer within 20s")
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once", n)
	}
}
