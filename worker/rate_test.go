package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/worker"
)

// rateFleet is a fleet (NATS, Redis, workers with a registry) whose calls
// the test publishes and whose results it reads itself, as a dispatcher
// would: the tests of execution rates need no dispatcher, and one of them
// stops Redis.
type rateFleet struct {
	t       *testing.T
	f       *fleettest.Fleet
	js      jetstream.JetStream
	results chan windlass.ToolResult

	mu     sync.Mutex
	starts map[string][]time.Time // by tool: when each call's tool began
}

func newRateFleet(t *testing.T) *rateFleet {
	t.Helper()
	f := fleettest.New(t)
	nc := f.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rf := &rateFleet{t: t, f: f, js: js, results: make(chan windlass.ToolResult, 1000), starts: map[string][]time.Time{}}
	sub, err := nc.Subscribe(layout.ResultInbox(origin), func(m *nats.Msg) {
		var r windlass.ToolResult
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Errorf("undecodable result %q: %v", m.Data, err)
			return
		}
		rf.results <- r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return rf
}

// tool is a tool named name that records when it starts and answers at
// once.
func (rf *rateFleet) tool(name string) windlass.Tool {
	return windlass.MustFunc(name, func(ctx context.Context, _ struct{}) (string, error) {
		now := time.Now()
		rf.mu.Lock()
		rf.starts[name] = append(rf.starts[name], now)
		rf.mu.Unlock()
		return "ran", nil
	})
}

// started returns the starts of tool so far.
func (rf *rateFleet) started(tool string) []time.Time {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	return slices.Clone(rf.starts[tool])
}

func (rf *rateFleet) publish(call windlass.ToolCall) {
	rf.t.Helper()
	data, err := json.Marshal(call)
	if err != nil {
		rf.t.Fatal(err)
	}
	msg := &nats.Msg{Subject: layout.CallSubject(call.Name, call.ID), Data: data, Header: nats.Header{layout.HeaderOrigin: []string{origin}}}
	if _, err := rf.js.PublishMsg(rf.t.Context(), msg); err != nil {
		rf.t.Fatal(err)
	}
}

func (rf *rateFleet) result(within time.Duration) windlass.ToolResult {
	rf.t.Helper()
	select {
	case r := <-rf.results:
		return r
	case <-time.After(within):
		rf.t.Fatalf("no result within %s", within)
		return windlass.ToolResult{}
	}
}

// cancel cancels a call as a dispatcher does: a record on the cancels
// stream.
func (rf *rateFleet) cancel(callID, reason string) {
	rf.t.Helper()
	data, _ := json.Marshal(windlass.Cancellation{CallID: callID, Reason: reason, At: time.Now()})
	if _, err := rf.js.PublishMsg(rf.t.Context(), &nats.Msg{Subject: layout.CancelSubject(callID), Data: data}); err != nil {
		rf.t.Fatal(err)
	}
}

// delivered waits until the tool's consumer has delivered n calls.
func (rf *rateFleet) delivered(tool string, n uint64) {
	rf.t.Helper()
	fleettest.WaitFor(rf.t, 10*time.Second, fmt.Sprintf("%d calls of %s delivered", n, tool), func() bool {
		c, err := rf.js.Consumer(context.Background(), layout.CallsStream, layout.ConsumerName(tool))
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.Delivered.Consumer >= n
	})
}

// TestExecutionRateHoldsAcrossWorkers: three workers of one tool with a
// rate of 20 calls a second, burst 1, start the calls of a backlog of 60
// no faster than that together.
func TestExecutionRateHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	const (
		calls = 60
		burst = 1
	)
	rate := limits.PerSecond(20).WithBurst(burst)
	rf := newRateFleet(t)
	tool := rf.tool("crm")
	for i := range 3 {
		// Each worker holds at most a third of the backlog, so all three
		// take their share and compete for turns.
		rf.f.StartWorker(worker.Config{ID: fmt.Sprint("w", i)}, fleettest.WithToolOptions(tool, worker.WithRate(rate), worker.WithConcurrency(calls/3)))
	}
	for i := range calls {
		rf.publish(windlass.ToolCall{ID: fmt.Sprint("rated-", i), Name: "crm"})
	}
	byWorker := map[string]int{}
	for range calls {
		r := rf.result(60 * time.Second)
		if r.IsError || r.Attempt != 1 || r.StartedAt.IsZero() {
			t.Errorf("result %+v: each call runs once, after its turn", r)
		}
		byWorker[r.Worker]++
	}
	starts := rf.started("crm")
	slices.SortFunc(starts, time.Time.Compare)
	if len(starts) != calls {
		t.Fatalf("%d starts, want %d", len(starts), calls)
	}
	// In every window from one start to a later one, the starts are at
	// most the burst plus the rate over the window. The starts are taken
	// by the tools, a little after their turns, so scheduling may bring
	// two closer than their turns were: allow two starts of slack, which
	// a tool without a rate (60 starts in milliseconds) is far beyond.
	perSecond := float64(rate.Events) / rate.Per.Seconds()
	worst := 0.0
	for i := range starts {
		for j := i + 1; j < len(starts); j++ {
			span := starts[j].Sub(starts[i]).Seconds()
			n := float64(j - i + 1)
			allowed := burst + perSecond*span + 2
			if n > allowed {
				t.Fatalf("%v starts within %.3fs (starts %d to %d): more than the burst %d plus %v/s over the window, with a slack of 2", n, span, i, j, burst, perSecond)
			}
			worst = max(worst, n-(burst+perSecond*span))
		}
	}
	total := starts[len(starts)-1].Sub(starts[0])
	t.Logf("%d starts in %s across workers %v: %.1f starts/s under a rate of %s; worst window %.2f starts over burst+rate", calls, total.Round(time.Millisecond), byWorker, float64(calls-1)/total.Seconds(), rate, worst)
	if len(byWorker) != 3 {
		t.Errorf("calls ran on workers %v, want all three sharing the rate", byWorker)
	}
}

// TestExecutionRateFailsClosedWhileRedisIsDown: while Redis is down a call
// of a tool with a rate waits queued and starts once Redis is back; a tool
// without a rate runs meanwhile.
func TestExecutionRateFailsClosedWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	rf := newRateFleet(t)
	var logs testserver.Buffer
	rf.f.StartWorker(worker.Config{AckWait: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		fleettest.WithToolOptions(rf.tool("crm"), worker.WithRate(limits.PerSecond(50))), rf.tool("echo"))
	rf.publish(windlass.ToolCall{ID: "before", Name: "crm"})
	if r := rf.result(10 * time.Second); r.IsError {
		t.Fatalf("before the outage: %+v", r)
	}

	rf.f.Redis.Stop()
	rf.publish(windlass.ToolCall{ID: "during", Name: "crm"})
	rf.publish(windlass.ToolCall{ID: "plain", Name: "echo"})
	if r := rf.result(10 * time.Second); r.CallID != "plain" || r.IsError {
		t.Fatalf("the call of the tool without a rate: %+v; want it answered during the outage", r)
	}
	fleettest.WaitFor(t, 10*time.Second, "the worker warned that the rate cannot be read", func() bool {
		return strings.Contains(logs.String(), "cannot be read from Redis")
	})
	// The call waits past an ack wait (the condition under test): its
	// in-progress acks keep it, and it is not redelivered.
	rf.delivered("crm", 2)
	waitingSince := time.Now()
	fleettest.WaitFor(t, 10*time.Second, "an ack wait and more passed", func() bool { return time.Since(waitingSince) > 4*time.Second })
	if n := len(rf.started("crm")); n != 1 {
		t.Fatalf("the rated tool started %d times during the outage, want none after the first call", n-1)
	}
	if info := rf.consumer("crm"); info.Delivered.Consumer != 2 || info.NumRedelivered != 0 {
		t.Errorf("consumer: delivered %d, redelivered %d; want the waiting call kept, not redelivered", info.Delivered.Consumer, info.NumRedelivered)
	}

	back := time.Now()
	rf.f.Redis.Restart(t)
	r := rf.result(30 * time.Second)
	if r.CallID != "during" || r.IsError || r.Attempt != 1 || r.StartedAt.Before(back) {
		t.Errorf("after the outage: %+v; want the waiting call run once, after Redis came back at %s", r, back.Format(time.StampMilli))
	}
}

// consumer returns the info of the tool's consumer.
func (rf *rateFleet) consumer(tool string) *jetstream.ConsumerInfo {
	rf.t.Helper()
	c, err := rf.js.Consumer(rf.t.Context(), layout.CallsStream, layout.ConsumerName(tool))
	if err != nil {
		rf.t.Fatal(err)
	}
	info, err := c.Info(rf.t.Context())
	if err != nil {
		rf.t.Fatal(err)
	}
	return info
}

// TestWaitForTurnEnds: a call waiting for its turn under a rate of one a
// minute ends at its deadline (timeout, not run), at a cancellation
// (canceled, not run), or at the worker's shutdown (handed back, not
// answered).
func TestWaitForTurnEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call windlass.ToolCall
		end  func(rf *rateFleet, w *fleettest.Worker)
		code windlass.ErrorCode // "": no answer
		text string
	}{
		{name: "deadline", call: windlass.ToolCall{ID: "late", Name: "crm", Deadline: time.Now().Add(time.Hour)}, code: windlass.CodeTimeout, text: "execution rate of 1/m"},
		{name: "cancel", call: windlass.ToolCall{ID: "unwanted", Name: "crm"}, end: func(rf *rateFleet, _ *fleettest.Worker) { rf.cancel("unwanted", "changed my mind") },
			code: windlass.CodeCanceled, text: "changed my mind"},
		{name: "shutdown", call: windlass.ToolCall{ID: "handed-back", Name: "crm"}, end: func(rf *rateFleet, w *fleettest.Worker) {
			if err := w.Stop(); err != nil {
				rf.t.Errorf("Run = %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rf := newRateFleet(t)
			w := rf.f.StartWorker(worker.Config{ShutdownGrace: time.Minute}, fleettest.WithToolOptions(rf.tool("crm"), worker.WithRate(limits.PerMinute(1))))
			rf.publish(windlass.ToolCall{ID: "first", Name: "crm"})
			if r := rf.result(10 * time.Second); r.IsError {
				t.Fatalf("first call: %+v", r)
			}
			call := tt.call
			if !call.Deadline.IsZero() {
				call.Deadline = time.Now().Add(time.Second) // long before the next turn, a minute after the first
			}
			rf.publish(call)
			rf.delivered("crm", 2)
			// Delivered by the server is not yet taken in by the worker: a
			// stop in between ends the pull the call is on its way to, and
			// it comes back only after the ack wait.
			fleettest.WaitFor(t, 10*time.Second, "the call waiting for its turn", func() bool { return w.Stats().WaitingForTurn == 1 })
			if tt.end != nil {
				tt.end(rf, w)
			}
			if tt.code == "" {
				select {
				case r := <-rf.results:
					t.Fatalf("answered %+v; want it handed back unanswered", r)
				default:
				}
				if s := w.Stats(); s.Requeued != 1 || s.Failed != 0 || s.Canceled != 0 || s.WaitingForTurn != 0 {
					t.Errorf("stats %+v: want the waiting call requeued once", s)
				}
				// Handed back: a worker of the tool without a rate runs it
				// at once, on its second delivery.
				rf.f.StartWorker(worker.Config{ID: "next"}, rf.tool("crm"))
				r := rf.result(30 * time.Second)
				if r.CallID != call.ID || r.IsError || r.Worker != "next" || r.Attempt != 2 {
					t.Errorf("result %+v; want the call run by the next worker on its second delivery", r)
				}
				if n := len(rf.started("crm")); n != 2 {
					t.Errorf("the tool ran %d times, want twice (the first call, and the handed-back one by the next worker)", n)
				}
				return
			}
			r := rf.result(30 * time.Second)
			if r.CallID != call.ID || r.Code() != tt.code || !strings.Contains(r.Content, tt.text) || !r.StartedAt.IsZero() || r.Attempt != 1 {
				t.Errorf("result %+v; want %s containing %q, not started", r, tt.code, tt.text)
			}
			if n := len(rf.started("crm")); n != 1 {
				t.Errorf("the tool ran %d times, want once (the first call only)", n)
			}
		})
	}
}

func TestWithRateErrors(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	js := f.JetStream()
	echo := windlass.MustFunc("echo", func(ctx context.Context, _ struct{}) (int, error) { return 0, nil })
	tests := []struct {
		name string
		cfg  worker.Config
		rate limits.Rate
		want string
	}{
		{name: "bad period", cfg: worker.Config{JetStream: js, Registry: f.Registry()}, rate: limits.Rate{Events: 5, Per: 2 * time.Second}, want: `register "echo": WithRate: limits: rate`},
		{name: "negative burst", cfg: worker.Config{JetStream: js, Registry: f.Registry()}, rate: limits.PerSecond(5).WithBurst(-1), want: "burst"},
		{name: "no registry", cfg: worker.Config{JetStream: js}, rate: limits.PerSecond(5), want: `register "echo": WithRate(5/s) needs Config.Registry`},
	}
	for _, tt := range tests {
		w, err := worker.New(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Register(echo, worker.WithRate(tt.rate)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Register = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
