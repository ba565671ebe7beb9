package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

// execution is one run of a tool as the tool saw it.
type execution struct {
	attempt int
	at      time.Time
}

// executions records every run of a tool, for assertions after the call.
type executions struct {
	mu   sync.Mutex
	runs []execution
}

func (e *executions) add(attempt int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = append(e.runs, execution{attempt: attempt, at: time.Now()})
}

func (e *executions) all() []execution {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]execution(nil), e.runs...)
}

func (e *executions) count() int { return len(e.all()) }

// failing is a tool named name that records each run and returns fail's
// error for the attempt (nil: success, the attempt's number as text).
func failing(name string, rec *executions, fail func(attempt int) error) windlass.Tool {
	return windlass.MustFunc(name, func(ctx context.Context, in struct {
		Text string `json:"text,omitempty"`
	}) (string, error) {
		info, ok := windlass.CallInfoFromContext(ctx)
		if !ok {
			return "", errors.New("no call info in the tool's context")
		}
		rec.add(info.Attempt)
		if err := fail(info.Attempt); err != nil {
			return "", err
		}
		return fmt.Sprintf("ok on attempt %d", info.Attempt), nil
	})
}

// createConsumer creates the tool's shared consumer the way a worker does,
// so the test can pull from it before (or instead of) a worker; a worker
// started later keeps its settings (its creator's).
func (b *bench) createConsumer(tool string, ackWait time.Duration) jetstream.Consumer {
	b.t.Helper()
	c, err := b.js.CreateOrUpdateConsumer(b.t.Context(), layout.CallsStream, jetstream.ConsumerConfig{
		Durable:       layout.ConsumerName(tool),
		FilterSubject: layout.CallsOfTool(tool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 20000,
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// takeAndLose pulls the next delivery of callID from cons as a worker that
// is then lost would: it never acks. It returns the delivery count.
func (b *bench) takeAndLose(cons jetstream.Consumer, callID string) uint64 {
	b.t.Helper()
	m := b.hold(cons)
	var call windlass.ToolCall
	if err := json.Unmarshal(m.Data(), &call); err != nil || call.ID != callID {
		b.t.Fatalf("pulled %q, want call %q", m.Data(), callID)
	}
	meta, err := m.Metadata()
	if err != nil {
		b.t.Fatal(err)
	}
	return meta.NumDelivered
}

// deadCall reads the dead record of callID from the dead calls stream.
func (b *bench) deadCall(tool, callID string) (windlass.DeadCall, bool) {
	b.t.Helper()
	s, err := b.js.Stream(b.t.Context(), layout.DeadStream)
	if err != nil {
		b.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(b.t.Context(), layout.DeadSubject(tool))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return windlass.DeadCall{}, false
	}
	if err != nil {
		b.t.Fatal(err)
	}
	var dc windlass.DeadCall
	if err := json.Unmarshal(m.Data, &dc); err != nil {
		b.t.Fatalf("dead record %q: %v", m.Data, err)
	}
	if dc.Call.ID != callID {
		b.t.Fatalf("dead record is of call %q, want %q", dc.Call.ID, callID)
	}
	return dc, true
}

// events reads every stored event of one kind of callID, oldest first.
func (b *bench) events(callID string, kind windlass.EventKind) []windlass.Event {
	b.t.Helper()
	s, err := b.js.Stream(b.t.Context(), layout.EventsStream)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []windlass.Event
	for seq := uint64(1); ; {
		m, err := s.GetMsg(b.t.Context(), seq, jetstream.WithGetMsgSubject(layout.EventSubject(callID, string(kind))))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			b.t.Fatal(err)
		}
		var e windlass.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			b.t.Fatalf("event %q: %v", m.Data, err)
		}
		out = append(out, e)
		seq = m.Sequence + 1
	}
}

// publishResult publishes r on the call's result subject exactly as a
// worker does: with the result's Nats-Msg-Id, durably.
func (b *bench) publishResult(r windlass.ToolResult) *jetstream.PubAck {
	b.t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		b.t.Fatal(err)
	}
	ack, err := b.js.PublishMsg(b.t.Context(), &nats.Msg{Subject: layout.ResultSubject(origin, r.CallID), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{layout.ResultMsgID(r.CallID)}}})
	if err != nil {
		b.t.Fatal(err)
	}
	return ack
}

// callGone checks that the call at seq left the work queue: deleted from
// the stream, nothing pending or unacknowledged on the tool's consumer.
func (b *bench) callGone(tool string, seq uint64) *jetstream.ConsumerInfo {
	b.t.Helper()
	b.callsStreamEmpties()
	info := b.consumerSettled(tool)
	s, err := b.js.Stream(b.t.Context(), layout.CallsStream)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := s.GetMsg(b.t.Context(), seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		b.t.Errorf("call at sequence %d is still in the calls stream (get: %v)", seq, err)
	}
	return info
}

func (b *bench) publishSeq(call windlass.ToolCall) uint64 {
	b.t.Helper()
	data, err := json.Marshal(call)
	if err != nil {
		b.t.Fatal(err)
	}
	ack, err := b.js.PublishMsg(b.t.Context(), &nats.Msg{Subject: layout.CallSubject(call.Name, call.ID), Data: data,
		Header: nats.Header{layout.HeaderOrigin: []string{origin}, nats.MsgIdHdr: []string{call.ID}}})
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

var errFlaky = errors.New("upstream flaked")

// TestRetryPolicy runs tools that fail on some attempts under a retry
// policy: a retryable error is retried with backoff up to MaxAttempts, the
// attempt number reaches the tool and the result, other errors are answered
// at once, and a call whose retries ran out is answered with its last error
// and recorded as dead.
func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	const backoff = 200 * time.Millisecond
	tests := []struct {
		name         string
		policy       worker.RetryPolicy
		fail         func(attempt int) error
		wantRuns     int
		wantCode     windlass.ErrorCode // "" for success
		wantContent  string
		wantDead     bool
		wantRetried  int64
		minGaps      []time.Duration // least time between the starts of consecutive attempts
		wantRetryErr bool            // a retrying event with the error was published
	}{
		{
			name:   "retryable twice then success",
			policy: worker.RetryPolicy{MaxAttempts: 3, InitialBackoff: backoff},
			fail: func(a int) error {
				if a < 3 {
					return windlass.Retryable(fmt.Errorf("attempt %d: %w", a, errFlaky))
				}
				return nil
			},
			wantRuns: 3, wantContent: "ok on attempt 3", wantRetried: 2,
			minGaps:      []time.Duration{backoff * 8 / 10, 2 * backoff * 8 / 10},
			wantRetryErr: true,
		},
		{
			name:     "a plain error is answered at once",
			policy:   worker.RetryPolicy{MaxAttempts: 3, InitialBackoff: backoff},
			fail:     func(a int) error { return errFlaky },
			wantRuns: 1, wantCode: windlass.CodeToolError, wantContent: "upstream flaked",
		},
		{
			name:   "retries run out: last error, dead record",
			policy: worker.RetryPolicy{MaxAttempts: 3, InitialBackoff: backoff},
			fail: func(a int) error {
				return windlass.Retryable(fmt.Errorf("attempt %d: %w", a, errFlaky))
			},
			wantRuns: 3, wantCode: windlass.CodeToolError, wantContent: "attempt 3: upstream flaked", wantDead: true, wantRetried: 2,
			minGaps: []time.Duration{backoff * 8 / 10, 2 * backoff * 8 / 10},
		},
		{
			name:   "the delay a tool asks for is honoured",
			policy: worker.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond},
			fail: func(a int) error {
				if a == 1 {
					return windlass.RetryAfter(errFlaky, 600*time.Millisecond)
				}
				return nil
			},
			wantRuns: 2, wantContent: "ok on attempt 2", wantRetried: 1,
			minGaps: []time.Duration{600 * time.Millisecond},
		},
		{
			name:     "MaxAttempts 1 disables retries and records nothing dead",
			policy:   worker.RetryPolicy{MaxAttempts: 1},
			fail:     func(a int) error { return windlass.Retryable(errFlaky) },
			wantRuns: 1, wantCode: windlass.CodeToolError, wantContent: "upstream flaked",
		},
		{
			name:   "a retryable call error keeps its code",
			policy: worker.RetryPolicy{MaxAttempts: 2, InitialBackoff: backoff},
			fail: func(a int) error {
				return &windlass.CallError{Code: windlass.CodeUnavailable, Message: fmt.Sprintf("attempt %d: down", a), Retryable: true}
			},
			wantRuns: 2, wantCode: windlass.CodeUnavailable, wantContent: "attempt 2: down", wantDead: true, wantRetried: 1,
			minGaps: []time.Duration{backoff * 8 / 10},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			var rec executions
			w, _ := b.start(worker.Config{}, failing("flaky", &rec, tt.fail), worker.WithRetry(tt.policy))
			seq := b.publishSeq(windlass.ToolCall{ID: "retry-me", Name: "flaky", Arguments: json.RawMessage(`{"text":"x"}`)})

			r := b.result(15 * time.Second)
			if r.CallID != "retry-me" || r.Code() != tt.wantCode || !strings.Contains(r.Content, tt.wantContent) {
				t.Errorf("result = %+v, want code %q containing %q", r, tt.wantCode, tt.wantContent)
			}
			if r.Attempt != tt.wantRuns {
				t.Errorf("result attempt = %d, want %d", r.Attempt, tt.wantRuns)
			}
			runs := rec.all()
			if len(runs) != tt.wantRuns {
				t.Fatalf("the tool ran %d times, want %d", len(runs), tt.wantRuns)
			}
			for i, run := range runs {
				if run.attempt != i+1 {
					t.Errorf("run %d saw attempt %d in its CallInfo", i+1, run.attempt)
				}
			}
			for i, least := range tt.minGaps {
				if gap := runs[i+1].at.Sub(runs[i].at); gap < least {
					t.Errorf("attempt %d started %s after attempt %d, want at least %s", i+2, gap, i+1, least)
				}
			}
			// Recorded before the answer was published.
			dc, dead := b.deadCall("flaky", "retry-me")
			if dead != tt.wantDead {
				t.Errorf("dead record present = %t, want %t", dead, tt.wantDead)
			}
			if dead && (dc.Deliveries != tt.wantRuns || dc.Error.Code != tt.wantCode || !strings.Contains(dc.Error.Message, tt.wantContent) ||
				dc.Call.Attempt != 0 || dc.Origin != origin || dc.Worker != w.ID() || string(dc.Call.Arguments) != `{"text":"x"}`) {
				t.Errorf("dead record = %+v", dc)
			}
			if tt.wantRetryErr {
				ev := b.events("retry-me", windlass.EventRetrying)
				if len(ev) != int(tt.wantRetried) || ev[0].Error == nil || !strings.Contains(ev[0].Error.Message, "attempt 1") || ev[0].Attempt != 1 {
					t.Errorf("retrying events = %+v", ev)
				}
			}
			b.callGone("flaky", seq)
			fleettest.WaitFor(b.t, 5*time.Second, "stats", func() bool {
				s := w.Stats()
				return s.Completed+s.Failed == 1
			})
			s := w.Stats()
			wantDead := int64(0)
			if tt.wantDead {
				wantDead = 1
			}
			if s.Retried != tt.wantRetried || s.Dead != wantDead {
				t.Errorf("stats = %+v, want %d retried, %d dead", s, tt.wantRetried, wantDead)
			}
			b.noResult(100 * time.Millisecond) // one answer per call
		})
	}
}

// TestInvalidArgumentsAreNeverRetried sends arguments the tool's schema
// refuses to a tool with retries: the call is answered invalid_arguments on
// its first delivery and terminated, so it leaves the work queue at once.
func TestInvalidArgumentsAreNeverRetried(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var rec executions
	w, _ := b.start(worker.Config{AckWait: 300 * time.Millisecond}, failing("strict", &rec, func(int) error { return nil }),
		worker.WithRetry(worker.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond}))
	seq := b.publishSeq(windlass.ToolCall{ID: "bad-args", Name: "strict", Arguments: json.RawMessage(`{"text":42}`)})
	r := b.result(5 * time.Second)
	if r.Code() != windlass.CodeInvalidArguments || !strings.Contains(r.Content, "$.text") || r.Attempt != 1 {
		t.Errorf("result = %+v", r)
	}
	info := b.callGone("strict", seq)
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("consumer delivered %d times, redelivered %d: want one delivery", info.Delivered.Consumer, info.NumRedelivered)
	}
	b.noResult(700 * time.Millisecond) // over twice the ack wait: no redelivery answers again
	if n := rec.count(); n != 0 {
		t.Errorf("the tool ran %d times on invalid arguments", n)
	}
	if s := w.Stats(); s.Retried != 0 || s.Dead != 0 || s.Failed != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// TestRetryIsNotBoundByTheQueueWait retries a call of a tool with a
// schedule-to-start bound shorter than its backoff: the bound is how long a
// call may wait before it first starts, so the retry runs instead of being
// answered timeout for "waiting in the queue" while it backed off.
func TestRetryIsNotBoundByTheQueueWait(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var rec executions
	tool := failing("flaky", &rec, func(a int) error {
		if a == 1 {
			return windlass.Retryable(errFlaky)
		}
		return nil
	})
	b.start(worker.Config{}, tool, worker.WithMaxQueueWait(250*time.Millisecond),
		worker.WithRetry(worker.RetryPolicy{MaxAttempts: 2, InitialBackoff: 500 * time.Millisecond}))
	b.publish(windlass.ToolCall{ID: "slow-retry", Name: "flaky", Arguments: json.RawMessage(`{}`)})
	if r := b.result(10 * time.Second); r.IsError || r.Attempt != 2 {
		t.Errorf("result = %+v, want success on attempt 2", r)
	}
	if n := rec.count(); n != 2 {
		t.Errorf("the tool ran %d times, want 2", n)
	}
}

// TestCallPastMaxDeliverIsAnsweredWorkerLost lets workers that are then
// lost (a raw pull that never acks) take a call MaxDeliver times; the
// delivery after that reaches a real worker, which answers worker_lost
// without running the tool, records the call as dead and removes it from
// the work queue. When an earlier attempt failed with a retryable error,
// the answer quotes it.
func TestCallPastMaxDeliverIsAnsweredWorkerLost(t *testing.T) {
	t.Parallel()
	const ackWait, maxDeliver = 300 * time.Millisecond, 2
	tests := []struct {
		name string
		// retryFirst: the first attempt runs on a worker and fails with a
		// retryable error; the later ones are lost.
		retryFirst bool
		wantText   string
	}{
		{name: "every delivery lost", wantText: "delivered 2 times"},
		{name: "lost after a retryable failure", retryFirst: true, wantText: "Its last error was: Error: upstream flaked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			var rec executions
			tool := failing("fragile", &rec, func(int) error { return windlass.Retryable(errFlaky) })
			cfg := worker.Config{AckWait: ackWait, MaxDeliver: maxDeliver}
			policy := worker.WithRetry(worker.RetryPolicy{MaxAttempts: maxDeliver, InitialBackoff: 200 * time.Millisecond})
			cons := b.createConsumer("fragile", ackWait)
			seq := b.publishSeq(windlass.ToolCall{ID: "doomed", Name: "fragile", Arguments: json.RawMessage(`{}`)})
			lost := 0
			if tt.retryFirst {
				first, stopFirst := b.start(cfg, tool, policy)
				fleettest.WaitFor(b.t, 5*time.Second, "first attempt handed back for a retry", func() bool { return first.Stats().Retried == 1 })
				stopFirst()
				lost = 1
			}
			for lost < maxDeliver {
				if n := b.takeAndLose(cons, "doomed"); n != uint64(lost+1) {
					t.Fatalf("lost delivery %d has delivery count %d", lost+1, n)
				}
				lost++
			}
			w, _ := b.start(cfg, tool, policy)
			r := b.result(10 * time.Second)
			if r.CallID != "doomed" || r.Code() != windlass.CodeWorkerLost || !strings.Contains(r.Content, tt.wantText) || r.Worker != w.ID() {
				t.Errorf("result = %+v, want worker_lost containing %q", r, tt.wantText)
			}
			wantRuns := 0
			if tt.retryFirst {
				wantRuns = 1
			}
			if n := rec.count(); n != wantRuns {
				t.Errorf("the tool ran %d times, want %d", n, wantRuns)
			}
			dc, ok := b.deadCall("fragile", "doomed")
			if !ok || dc.Deliveries != maxDeliver || dc.Error.Code != windlass.CodeWorkerLost || dc.Origin != origin || dc.Worker != w.ID() || dc.Call.Attempt != 0 {
				t.Errorf("dead record = %+v (found %t), want %d deliveries, worker_lost", dc, ok, maxDeliver)
			}
			b.callGone("fragile", seq)
			fleettest.WaitFor(b.t, 5*time.Second, "stats", func() bool { return w.Stats().Failed == 1 })
			if s := w.Stats(); s.Dead != 1 || s.Retried != 0 {
				t.Errorf("stats = %+v", s)
			}
		})
	}
}

// TestRedeliveredCallWithAResultIsAckedWithoutRunning redelivers a call
// whose result is already in the results stream (its last worker answered
// and was lost before its ack landed): the worker acks it without running
// the tool and publishes nothing, also when that redelivery is past
// MaxDeliver: the call was answered, so it is not dead.
func TestRedeliveredCallWithAResultIsAckedWithoutRunning(t *testing.T) {
	t.Parallel()
	const maxDeliver = 2
	tests := []struct {
		name string
		lost int // deliveries taken by lost workers; the last one answered
	}{
		{name: "second delivery", lost: 1},
		{name: "delivery past MaxDeliver", lost: maxDeliver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			var rec executions
			tool := failing("once", &rec, func(int) error { return nil })
			cons := b.createConsumer("once", 300*time.Millisecond)
			seq := b.publishSeq(windlass.ToolCall{ID: "answered", Name: "once", Arguments: json.RawMessage(`{}`)})
			for range tt.lost {
				b.takeAndLose(cons, "answered")
			}
			b.publishResult(windlass.ToolResult{CallID: "answered", Name: "once", Content: "from the lost worker", Attempt: tt.lost, Worker: "lost"})
			if r := b.result(5 * time.Second); r.Content != "from the lost worker" {
				t.Fatalf("first result = %+v", r)
			}
			w, _ := b.start(worker.Config{AckWait: 300 * time.Millisecond, MaxDeliver: maxDeliver}, tool)
			fleettest.WaitFor(b.t, 5*time.Second, "redelivery acked", func() bool { return w.Stats().AlreadyAnswered == 1 })
			b.callGone("once", seq)
			b.noResult(200 * time.Millisecond)
			if n := rec.count(); n != 0 {
				t.Errorf("the tool ran %d times for a call already answered", n)
			}
			if s := w.Stats(); s.Completed != 0 || s.Failed != 0 || s.DuplicateResults != 0 || s.Dead != 0 {
				t.Errorf("stats = %+v", s)
			}
			if dc, dead := b.deadCall("once", "answered"); dead {
				t.Errorf("an answered call was recorded dead: %+v", dc)
			}
			if stored, ok := b.storedResult("answered"); !ok || stored.Content != "from the lost worker" {
				t.Errorf("stored result = %+v (%t)", stored, ok)
			}
		})
	}
}

// TestARedeliveryWhoseAnswerCannotBeReadIsNotRun redelivers a call whose
// answer is stored (its last worker answered and was lost before its ack
// landed) to a worker that cannot read the results stream: the worker
// asks again in place, neither running the call nor handing it back (a
// hand-back is a delivery), and once the stream can be read, it acks the
// call without running it — a call without a deadline too (PROTOCOL.md:
// `deadline` is optional). Before, a read that failed was taken for "no
// answer", and the tool ran again because its worker's ack was lost; and
// at 5175a47 a call without a deadline was asked about for one ack wait,
// which the first failed read had used up, and then ran (found by a
// review helper).
func TestARedeliveryWhoseAnswerCannotBeReadIsNotRun(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		deadline time.Duration // from now; 0: none
	}{{"deadline", time.Minute}, {"no deadline", 0}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			blocker := &fleettest.ReadBlocker{Stream: layout.ResultsStream}
			blocker.Block(true)
			js, err := jetstream.New(b.nats.Connect(t, nats.SetCustomDialer(blocker)))
			if err != nil {
				t.Fatal(err)
			}
			var rec executions
			tool := failing("once", &rec, func(int) error { return nil })
			cons := b.createConsumer("once", 300*time.Millisecond)
			call := windlass.ToolCall{ID: "answered", Name: "once", Arguments: json.RawMessage(`{}`)}
			if tt.deadline > 0 {
				call.Deadline = time.Now().Add(tt.deadline)
			}
			seq := b.publishSeq(call)
			b.takeAndLose(cons, "answered")
			b.publishResult(windlass.ToolResult{CallID: "answered", Name: "once", Content: "from the lost worker", Attempt: 1, Worker: "lost"})
			if r := b.result(5 * time.Second); r.Content != "from the lost worker" {
				t.Fatalf("first result = %+v", r)
			}
			w, _ := b.start(worker.Config{JetStream: js, AckWait: 300 * time.Millisecond, MaxDeliver: 2}, tool)
			// Two reads lost (each a 2 s timeout): the worker asked again.
			fleettest.WaitFor(t, 30*time.Second, "two reads lost, or the call run", func() bool { return blocker.Lost() >= 2 || rec.count() > 0 })
			if n := rec.count(); n != 0 {
				t.Fatalf("the tool ran %d times for a call whose answer could not be read (stats %+v)", n, w.Stats())
			}
			if s := w.Stats(); s.Requeued != 0 {
				t.Errorf("stats %+v: the call was handed back (each hand-back a delivery towards MaxDeliver); want it kept while the worker asks again", s)
			}
			blocker.Block(false)
			fleettest.WaitFor(t, 30*time.Second, "the redelivery acked unrun", func() bool { return w.Stats().AlreadyAnswered == 1 })
			b.callGone("once", seq)
			if n := rec.count(); n != 0 {
				t.Errorf("the tool ran %d times for a call already answered", n)
			}
			if s := w.Stats(); s.Completed != 0 || s.Failed != 0 || s.Dead != 0 {
				t.Errorf("stats = %+v; want nothing answered or dead", s)
			}
			if dc, dead := b.deadCall("once", "answered"); dead {
				t.Errorf("an answered call was recorded dead: %+v", dc)
			}
			if stored, ok := b.storedResult("answered"); !ok || stored.Content != "from the lost worker" {
				t.Errorf("stored result = %+v (%t)", stored, ok)
			}
		})
	}
}

// TestARetryThroughAResultsReadOutageIsNotBuried: a tool fails retryably
// on its first attempt; while the retry waits, the worker cannot read the
// results stream for a while (here: the stream is gone; in production its
// leader unreachable). No worker is lost: once the stream can be read
// again, the retry runs and answers, nothing is recorded dead. Before the
// worker asked again in place, each failed read handed the call back, each
// hand-back was a delivery, and the call was buried worker_lost ("each
// worker that took it stopped answering") past MaxDeliver. (Found by a
// review helper.)
func TestARetryThroughAResultsReadOutageIsNotBuried(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var rec executions
	gone := make(chan struct{})
	tool := failing("flaky", &rec, func(a int) error {
		if a == 1 {
			if err := b.js.DeleteStream(t.Context(), layout.ResultsStream); err != nil {
				t.Error(err)
			}
			close(gone)
			return windlass.Retryable(fmt.Errorf("attempt %d: %w", a, errFlaky))
		}
		return nil
	})
	const maxDeliver = 3
	var logs testserver.Buffer
	w, _ := b.start(worker.Config{MaxDeliver: maxDeliver, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, tool,
		worker.WithRetry(worker.RetryPolicy{MaxAttempts: maxDeliver, InitialBackoff: 100 * time.Millisecond}))
	b.publish(windlass.ToolCall{ID: "retry-in-outage", Name: "flaky", Arguments: json.RawMessage(`{}`)})
	<-gone
	fleettest.WaitFor(t, 30*time.Second, "the retry's delivery asking again, handed back, or run", func() bool {
		return strings.Contains(logs.String(), "asking again") || w.Stats().Requeued > 0 || rec.count() >= 2
	})
	if s := w.Stats(); s.Requeued != 0 {
		t.Errorf("stats %+v: the call was handed back while the results could not be read; each hand-back is a delivery towards MaxDeliver", s)
	}
	if err := layout.EnsureStreams(t.Context(), b.js, layout.ResultsConfig(layout.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	r := b.result(30 * time.Second)
	if r.Code() == windlass.CodeWorkerLost || r.IsError {
		t.Errorf("a call whose every worker answered was told %s: %q", r.Code(), r.Content)
	}
	if dc, dead := b.deadCall("flaky", "retry-in-outage"); dead {
		t.Errorf("recorded dead after %d deliveries, none lost: %+v", dc.Deliveries, dc.Error)
	}
	if rec.count() != 2 {
		t.Errorf("the tool ran %d times; want 2 (its retry)", rec.count())
	}
}

// TestSecondResultIsDroppedAndCounted runs a call that already has an
// answer (a cancel raced it, or a stale worker): the worker's own result is
// dropped by the results stream, counted as a duplicate, and the first
// answer stays the call's result.
func TestSecondResultIsDroppedAndCounted(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var rec executions
	w, _ := b.start(worker.Config{}, failing("racy", &rec, func(int) error { return nil }))
	if ack := b.publishResult(windlass.ToolResult{CallID: "twice", Name: "racy", Content: "first"}); ack.Duplicate {
		t.Fatal("the first result was a duplicate")
	}
	if r := b.result(5 * time.Second); r.Content != "first" {
		t.Fatalf("first = %+v", r)
	}
	b.publish(windlass.ToolCall{ID: "twice", Name: "racy", Arguments: json.RawMessage(`{}`)})
	if r := b.result(5 * time.Second); r.Content != "ok on attempt 1" { // live subscribers see every publish
		t.Fatalf("second = %+v", r)
	}
	fleettest.WaitFor(b.t, 5*time.Second, "duplicate counted", func() bool { return w.Stats().DuplicateResults == 1 })
	if stored, ok := b.storedResult("twice"); !ok || stored.Content != "first" {
		t.Errorf("stored result = %+v (%t), want the first", stored, ok)
	}
	if s := w.Stats(); s.Completed != 1 || s.AlreadyAnswered != 0 || rec.count() != 1 {
		t.Errorf("stats = %+v, runs %d", s, rec.count())
	}
}

// TestProgressGoesOutAtHeartbeats runs a tool that reports progress several
// times between two heartbeats: the started event and then the latest
// report reach the events stream, not every report.
func TestProgressGoesOutAtHeartbeats(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	release := make(chan struct{})
	var reported atomic.Bool
	tool := windlass.MustFunc("long", func(ctx context.Context, _ struct{}) (string, error) {
		for i := 1; i <= 3; i++ {
			windlass.ReportProgress(ctx, float64(i)/10, fmt.Sprintf("step %d", i))
		}
		reported.Store(true)
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	w, _ := b.start(worker.Config{AckWait: 3 * time.Second, Heartbeat: 300 * time.Millisecond}, tool)
	b.publish(windlass.ToolCall{ID: "progressing", Name: "long"})
	fleettest.WaitFor(b.t, 5*time.Second, "progress event", func() bool { return reported.Load() && len(b.events("progressing", windlass.EventProgress)) > 0 })
	close(release)
	if r := b.result(5 * time.Second); r.IsError {
		t.Fatalf("result = %+v", r)
	}
	started := b.events("progressing", windlass.EventStarted)
	if len(started) != 1 || started[0].Attempt != 1 || started[0].Worker != w.ID() || started[0].Tool != "long" {
		t.Errorf("started events = %+v", started)
	}
	progress := b.events("progressing", windlass.EventProgress)
	last := progress[len(progress)-1]
	if len(progress) > 2 || last.Progress == nil || last.Progress.Fraction != 0.3 || last.Progress.Message != "step 3" || last.Attempt != 1 {
		t.Errorf("progress events = %+v, want the latest report (0.3, step 3) once", progress)
	}
}

// TestStoppedWorkerTakesNoDelivery stops a worker and publishes a call
// right after Run returned: the call must not be delivered to the stopped
// worker's last pull request (lost until the ack wait, a delivery counted
// towards MaxDeliver), but wait for the next puller's first delivery.
func TestStoppedWorkerTakesNoDelivery(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	cons := b.createConsumer("echo", 300*time.Millisecond)
	for i := range 10 {
		_, stop := b.start(worker.Config{AckWait: 300 * time.Millisecond}, countingEcho(&runs))
		stop()
		id := fmt.Sprint("after-stop-", i)
		b.publish(windlass.ToolCall{ID: id, Name: "echo", Arguments: json.RawMessage(`{"text":"x"}`)})
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if meta.NumDelivered != 1 {
				t.Fatalf("round %d: the call's first delivery to a live puller was delivery %d", i, meta.NumDelivered)
			}
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if runs.Load() != 0 {
		t.Errorf("stopped workers ran %d calls", runs.Load())
	}
}
