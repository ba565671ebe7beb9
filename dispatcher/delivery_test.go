package dispatcher_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// startWorker runs a worker of tool with cfg until the test ends or stop
// is called, and waits until the env's dispatcher sees it live.
func (e *env) startWorker(cfg worker.Config, tool windlass.Tool, opts ...worker.ToolOption) (w *worker.Worker, stop func()) {
	e.t.Helper()
	fw := e.StartWorker(cfg, fleettest.WithToolOptions(tool, opts...))
	e.liveIn(e.d, tool.Spec().Name, fw.ID())
	// A Run error is reported by the fleet's cleanup.
	return fw.Worker, func() { _ = fw.Stop() }
}

// liveIn waits until d's view lists workerID ("": any worker) as a live
// worker of tool.
func (e *env) liveIn(d *dispatcher.Dispatcher, tool, workerID string) {
	e.t.Helper()
	fleettest.WaitFor(e.t, 10*time.Second, "worker "+workerID+" live", func() bool {
		cat, _ := d.Catalog(e.t.Context())
		for _, c := range cat {
			if c.Spec.Name == tool && (workerID == "" || slices.Contains(c.Workers, workerID)) {
				return true
			}
		}
		return false
	})
}

// another returns a second dispatcher instance on its own connection.
func (e *env) another() *dispatcher.Dispatcher {
	e.t.Helper()
	return e.Dispatcher(dispatcher.Config{})
}

// callsQueueEmpties waits until the calls stream holds no message.
func (e *env) callsQueueEmpties() {
	e.t.Helper()
	s, err := e.JetStream().Stream(e.t.Context(), layout.CallsStream)
	if err != nil {
		e.t.Fatal(err)
	}
	fleettest.WaitFor(e.t, 10*time.Second, "calls stream empty", func() bool {
		info, err := s.Info(e.t.Context())
		return err == nil && info.State.Msgs == 0
	})
}

// publishResult publishes r on the call's result subject for origin exactly
// as a worker does: with the result's Nats-Msg-Id (msgID overrides it when
// set), durably. It reports whether the stream kept it.
func (e *env) publishResult(origin string, r windlass.ToolResult, msgID string) bool {
	e.t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		e.t.Fatal(err)
	}
	ack, err := e.JetStream().PublishMsg(e.t.Context(), &nats.Msg{Subject: layout.ResultSubject(origin, r.CallID), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{cmpOr(msgID, layout.ResultMsgID(r.CallID))}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return !ack.Duplicate
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// storedResult waits until the results stream has d's result of id.
func storedResult(t *testing.T, d *dispatcher.Dispatcher, id string) windlass.ToolResult {
	t.Helper()
	var r windlass.ToolResult
	fleettest.WaitFor(t, 5*time.Second, "stored result of "+id, func() bool {
		var err error
		r, err = d.Result(t.Context(), id)
		return err == nil
	})
	return r
}

func waitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// gate is a tool that tells when a call starts and runs until the test
// releases it (or its context ends), recording the cause it ended with.
type gate struct {
	started  chan string // call ids, as they start
	release  chan struct{}
	mu       sync.Mutex
	ran      []string
	causes   map[string]error
	progress *windlass.Progress // reported on start when set
}

func newGate() *gate {
	return &gate{started: make(chan string, 16), release: make(chan struct{}), causes: map[string]error{}}
}

func (g *gate) tool(name string) windlass.Tool {
	return windlass.MustFunc(name, func(ctx context.Context, in struct {
		Text string `json:"text,omitempty"`
	}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		g.mu.Lock()
		g.ran = append(g.ran, info.ID)
		g.mu.Unlock()
		if g.progress != nil {
			windlass.ReportProgress(ctx, g.progress.Fraction, g.progress.Message)
		}
		g.started <- info.ID
		select {
		case <-g.release:
			return "released " + in.Text, nil
		case <-ctx.Done():
			g.mu.Lock()
			g.causes[info.ID] = context.Cause(ctx)
			g.mu.Unlock()
			return "", ctx.Err()
		}
	})
}

func (g *gate) waitStarted(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-g.started:
		if got != id {
			t.Fatalf("call %q started, want %q", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("call %q never started", id)
	}
}

func (g *gate) runs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.ran)
}

func (g *gate) cause(id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.causes[id]
}

// TestRetryingCallThroughTheFleet submits a call whose first attempt fails
// with a retryable error: while it backs off, a second dispatcher instance
// reports it retrying with the error, and the caller gets the second
// attempt's success.
func TestRetryingCallThroughTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var runs atomic.Int64
	tool := windlass.MustFunc("flaky", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		if info, _ := windlass.CallInfoFromContext(ctx); info.Attempt == 1 {
			return "", windlass.Retryable(errors.New("rate limited"))
		}
		return "second time lucky", nil
	})
	w, _ := e.startWorker(worker.Config{}, tool, worker.WithRetry(worker.RetryPolicy{MaxAttempts: 2, InitialBackoff: 2 * time.Second}))
	other := e.another()
	id, err := e.d.Submit(t.Context(), "flaky", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st dispatcher.CallStatus
	fleettest.WaitFor(t, 5*time.Second, "retrying status", func() bool {
		st, err = other.Status(t.Context(), id)
		return err == nil && st.State == dispatcher.StateRetrying
	})
	if st.LastError == nil || !st.LastError.Retryable || !strings.Contains(st.LastError.Message, "rate limited") ||
		st.Attempt != 1 || st.Worker != w.ID() || st.Tool != "flaky" || !st.RetryAt.After(st.StartedAt) || st.Result != nil {
		t.Errorf("status while backing off = %+v (last error %+v)", st, st.LastError)
	}
	r, err := other.Wait(waitCtx(t, 10*time.Second), id)
	if err != nil || r.IsError || r.Content != "second time lucky" || r.Attempt != 2 {
		t.Errorf("Wait = %+v, %v", r, err)
	}
	if runs.Load() != 2 {
		t.Errorf("ran %d times, want 2", runs.Load())
	}
	if dead, err := e.d.DeadCalls(t.Context(), "", 0); err != nil || len(dead) != 0 {
		t.Errorf("dead calls = %+v, %v: a call that succeeded on a retry is not dead", dead, err)
	}
}

// TestWorkerLostPastMaxDeliverAndReplay lets lost workers (raw pulls that
// never ack) take a call MaxDeliver times: the next worker answers it
// worker_lost without running it, the caller gets that answer, the call is
// listed as dead and gone from the work queue. Replay runs it again under a
// new id that remembers the old one, and removes the dead record.
func TestWorkerLostPastMaxDeliverAndReplay(t *testing.T) {
	t.Parallel()
	const maxDeliver = 2
	e := newEnv(t)
	var mu sync.Mutex
	ran := map[string]windlass.CallInfo{}
	tool := windlass.MustFunc("fragile", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		mu.Lock()
		ran[info.ID] = info
		mu.Unlock()
		return "done", nil
	})
	// A 1 s ack wait: with 300 ms, one loaded -race run recorded 5
	// deliveries, not 2 (the third delivery was followed by more before the
	// worker buried the call; whether they lapsed or were handed back was
	// not captured). Passed 6 of 6 runs with 300 ms alone.
	cfg := worker.Config{AckWait: time.Second, MaxDeliver: maxDeliver}
	// A first worker creates the tool's consumer and advertises the tool,
	// then goes away: the call waits in the queue for the lost workers.
	_, stopFirst := e.startWorker(cfg, tool)
	stopFirst()
	id, err := e.d.Submit(t.Context(), "fragile", nil, dispatcher.AllowNoWorker(), dispatcher.WithTimeout(30*time.Second),
		dispatcher.WithMetadata(map[string]string{"requester": "agent-7"}))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := e.JetStream().Consumer(t.Context(), layout.CallsStream, layout.ConsumerName("fragile"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= maxDeliver; i++ {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() { // taken and never acked: the worker was lost
			meta, _ := m.Metadata()
			if meta == nil || meta.NumDelivered != uint64(i) {
				t.Fatalf("delivery %d: metadata %+v", i, meta)
			}
			got++
		}
		if got != 1 {
			t.Fatalf("delivery %d: got %d messages (%v)", i, got, batch.Error())
		}
	}
	w, _ := e.startWorker(cfg, tool)
	r, err := e.d.Wait(waitCtx(t, 10*time.Second), id)
	if err != nil || r.Code() != windlass.CodeWorkerLost || r.Worker != w.ID() {
		t.Fatalf("Wait = %+v, %v; want worker_lost", r, err)
	}
	mu.Lock()
	_, lostRan := ran[id]
	mu.Unlock()
	if lostRan {
		t.Error("the lost call ran on the worker past MaxDeliver")
	}
	e.callsQueueEmpties()

	for _, tool := range []string{"fragile", ""} {
		dead, err := e.d.DeadCalls(t.Context(), tool, 0)
		if err != nil || len(dead) != 1 {
			t.Fatalf("DeadCalls(%q) = %+v, %v", tool, dead, err)
		}
		dc := dead[0]
		if dc.Call.ID != id || dc.Deliveries != maxDeliver || dc.Error.Code != windlass.CodeWorkerLost || dc.Seq == 0 ||
			dc.Origin != e.d.ID() || dc.Call.Metadata["requester"] != "agent-7" {
			t.Errorf("DeadCalls(%q)[0] = %+v", tool, dc)
		}
	}
	if dead, err := e.d.DeadCalls(t.Context(), "other", 0); err != nil || len(dead) != 0 {
		t.Errorf("DeadCalls(other) = %+v, %v", dead, err)
	}

	dead, _ := e.d.DeadCalls(t.Context(), "fragile", 0)
	newID, err := e.d.Replay(t.Context(), dead[0].Seq, dispatcher.WithTimeout(10*time.Second),
		dispatcher.WithMetadata(map[string]string{"replayed_by": "ops"}))
	if err != nil || newID == id || newID == "" {
		t.Fatalf("Replay = %q, %v", newID, err)
	}
	if r, err := e.d.Wait(waitCtx(t, 10*time.Second), newID); err != nil || r.IsError || r.Content != "done" {
		t.Errorf("replayed call: %+v, %v", r, err)
	}
	mu.Lock()
	info, ok := ran[newID]
	mu.Unlock()
	if !ok || info.Metadata[dispatcher.MetadataReplayOf] != id || info.Metadata["requester"] != "agent-7" || info.Metadata["replayed_by"] != "ops" || info.Attempt != 1 {
		t.Errorf("replayed call ran as %+v (%t)", info, ok)
	}
	if left, err := e.d.DeadCalls(t.Context(), "", 0); err != nil || len(left) != 0 {
		t.Errorf("dead calls after replay = %+v, %v", left, err)
	}
	if _, err := e.d.Replay(t.Context(), dead[0].Seq); !errors.Is(err, dispatcher.ErrNoDeadCall) {
		t.Errorf("second Replay = %v, want ErrNoDeadCall", err)
	}
}

// TestCancel cancels calls where they stand: queued with no worker running,
// queued behind a busy worker, and running. The caller is answered
// canceled with the reason; a queued call never runs when a worker pulls it
// later; a running one's context ends with cause ErrCallCanceled.
func TestCancel(t *testing.T) {
	t.Parallel()
	const reason = "the user pressed stop"
	tests := []struct {
		name string
		// run submits the call to cancel, cancels it and returns its id
		// and the worker that ends up with it.
		run func(t *testing.T, e *env, g *gate) (id string, w *worker.Worker)
		// ranOnce: the canceled call had started before it was canceled.
		ranOnce bool
		// settled tells, from the stats of the worker that ends up with
		// the call, that it dealt with the canceled call. Default: it
		// answered canceled, its answer dropped as the second one.
		settled func(worker.Stats) bool
	}{
		{
			name: "queued, no worker running",
			run: func(t *testing.T, e *env, g *gate) (string, *worker.Worker) {
				_, stop := e.startWorker(worker.Config{}, g.tool("gated"))
				stop()
				id, err := e.d.Submit(t.Context(), "gated", nil, dispatcher.AllowNoWorker(), dispatcher.WithTimeout(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if err := e.d.Cancel(t.Context(), id, reason); err != nil {
					t.Fatalf("Cancel = %v", err)
				}
				expectCanceled(t, e.d, id, reason)
				w, _ := e.startWorker(worker.Config{}, g.tool("gated"))
				return id, w
			},
		},
		{
			name: "queued behind a busy worker",
			run: func(t *testing.T, e *env, g *gate) (string, *worker.Worker) {
				w, _ := e.startWorker(worker.Config{}, g.tool("gated"), worker.WithConcurrency(1))
				busy, err := e.d.Submit(t.Context(), "gated", map[string]string{"text": "busy"})
				if err != nil {
					t.Fatal(err)
				}
				g.waitStarted(t, busy)
				id, err := e.d.Submit(t.Context(), "gated", nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.d.Cancel(t.Context(), id, reason); err != nil {
					t.Fatalf("Cancel = %v", err)
				}
				expectCanceled(t, e.d, id, reason)
				close(g.release)
				if r, err := e.d.Wait(waitCtx(t, 10*time.Second), busy); err != nil || r.Content != "released busy" {
					t.Errorf("busy call = %+v, %v", r, err)
				}
				return id, w
			},
		},
		{
			name: "running",
			run: func(t *testing.T, e *env, g *gate) (string, *worker.Worker) {
				w, _ := e.startWorker(worker.Config{}, g.tool("gated"))
				other := e.another()
				id, err := e.d.Submit(t.Context(), "gated", nil)
				if err != nil {
					t.Fatal(err)
				}
				g.waitStarted(t, id)
				if err := other.Cancel(t.Context(), id, reason); err != nil { // from any instance
					t.Fatalf("Cancel = %v", err)
				}
				expectCanceled(t, e.d, id, reason)
				fleettest.WaitFor(t, 5*time.Second, "the tool's context canceled", func() bool { return g.cause(id) != nil })
				if cause := g.cause(id); !errors.Is(cause, windlass.ErrCallCanceled) || !strings.Contains(cause.Error(), reason) {
					t.Errorf("the tool's context ended with cause %v, want ErrCallCanceled with the reason", cause)
				}
				return id, w
			},
			ranOnce: true,
			// The worker's canceled answer may be the first one stored:
			// it races Cancel's own.
			settled: func(s worker.Stats) bool { return s.Canceled == 1 },
		},
		{
			name: "backing off before a retry",
			run: func(t *testing.T, e *env, g *gate) (string, *worker.Worker) {
				var attempts atomic.Int64
				flaky := windlass.MustFunc("gated", func(ctx context.Context, _ struct{}) (string, error) {
					info, _ := windlass.CallInfoFromContext(ctx)
					attempts.Add(1)
					g.mu.Lock()
					g.ran = append(g.ran, info.ID)
					g.mu.Unlock()
					return "", windlass.Retryable(errors.New("try later"))
				})
				w, _ := e.startWorker(worker.Config{}, flaky, worker.WithRetry(worker.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second}))
				id, err := e.d.Submit(t.Context(), "gated", nil)
				if err != nil {
					t.Fatal(err)
				}
				fleettest.WaitFor(t, 5*time.Second, "retrying", func() bool {
					st, err := e.d.Status(t.Context(), id)
					return err == nil && st.State == dispatcher.StateRetrying
				})
				if err := e.d.Cancel(t.Context(), id, reason); err != nil {
					t.Fatalf("Cancel = %v", err)
				}
				expectCanceled(t, e.d, id, reason)
				// The retry is delivered after the backoff and finds the
				// call answered: acked without running again.
				fleettest.WaitFor(t, 10*time.Second, "the retry acked unrun", func() bool { return w.Stats().AlreadyAnswered == 1 })
				if n := attempts.Load(); n != 1 {
					t.Errorf("the tool ran %d times, want only the first attempt", n)
				}
				return id, w
			},
			ranOnce: true,
			settled: func(s worker.Stats) bool { return s.AlreadyAnswered == 1 && s.Retried == 1 && s.Dead == 0 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := newGate()
			id, w := tt.run(t, e, g)
			// The worker that ends up with the call answers it canceled;
			// that answer is dropped as the call's second one.
			settled := tt.settled
			if settled == nil {
				settled = func(s worker.Stats) bool { return s.Canceled == 1 && s.DuplicateResults == 1 }
			}
			// On failure, say which way the worker went: stats with the
			// tool run (Completed) and no Canceled mean it took the call as
			// not canceled.
			defer func() {
				if t.Failed() {
					t.Logf("worker stats %+v; the tool ran for %v", w.Stats(), g.runs())
				}
			}()
			// Settling takes a fetch, a duplicate publish and an ack after
			// the test's last wait; on a machine loaded as by a cold `make
			// test` (every package compiling and testing at once) it was
			// not done within 10s once.
			fleettest.WaitFor(t, 30*time.Second, "the worker settled the canceled call", func() bool { return settled(w.Stats()) })
			e.callsQueueEmpties()
			if ran := slices.Contains(g.runs(), id); ran != tt.ranOnce {
				t.Errorf("the canceled call ran: %t, want %t (runs %v)", ran, tt.ranOnce, g.runs())
			}
			if r := storedResult(t, e.d, id); r.Code() != windlass.CodeCanceled || !strings.Contains(r.Content, reason) {
				t.Errorf("stored result = %+v", r)
			}
			var finished *dispatcher.FinishedError
			if err := e.d.Cancel(t.Context(), id, "again"); !errors.As(err, &finished) || finished.Result.Code() != windlass.CodeCanceled {
				t.Errorf("second Cancel = %v, want a FinishedError with the canceled result", err)
			}
		})
	}
}

// expectCanceled waits for the result of id and checks it is canceled with
// reason.
func expectCanceled(t *testing.T, d *dispatcher.Dispatcher, id, reason string) {
	t.Helper()
	r, err := d.Wait(waitCtx(t, 5*time.Second), id)
	if err != nil || r.Code() != windlass.CodeCanceled || !strings.Contains(r.Content, reason) || r.CallID != id {
		t.Errorf("Wait after Cancel = %+v, %v; want canceled quoting %q", r, err, reason)
	}
}

// TestCancelFinishedOrUnknownCall cancels a call that has its result, one
// the fleet never saw and an invalid id.
func TestCancelFinishedOrUnknownCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	r, err := e.d.Call(t.Context(), "greet", greetArgs{Name: "ada"}, dispatcher.WithCallID("done-call"))
	if err != nil || r.IsError {
		t.Fatalf("Call = %+v, %v", r, err)
	}
	storedResult(t, e.d, "done-call")
	var finished *dispatcher.FinishedError
	if err := e.d.Cancel(t.Context(), "done-call", "too late"); !errors.As(err, &finished) || finished.Result.Content != "hello ada" {
		t.Errorf("Cancel(finished) = %v, want a FinishedError with the result", err)
	}
	if r, err := e.d.Result(t.Context(), "done-call"); err != nil || r.Content != "hello ada" {
		t.Errorf("result after a refused Cancel = %+v, %v", r, err)
	}
	if err := e.d.Cancel(t.Context(), "never-submitted", "why"); !errors.Is(err, dispatcher.ErrUnknownCall) {
		t.Errorf("Cancel(unknown) = %v, want ErrUnknownCall", err)
	}
	if err := e.d.Cancel(t.Context(), "bad id", "why"); err == nil || errors.Is(err, dispatcher.ErrUnknownCall) {
		t.Errorf("Cancel(invalid id) = %v", err)
	}
}

// TestWatchAndStatusOfALongCall watches a call that reports progress
// through its worker's heartbeat: Watch yields queued, started, progress
// and finished in order; a second dispatcher's Status shows it running with
// its progress, then finished with its result.
func TestWatchAndStatusOfALongCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate()
	g.progress = &windlass.Progress{Fraction: 0.5, Message: "halfway"}
	w, _ := e.startWorker(worker.Config{AckWait: 3 * time.Second, Heartbeat: 50 * time.Millisecond}, g.tool("long"))
	other := e.another()
	id, err := e.d.Submit(t.Context(), "long", map[string]string{"text": "job"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []windlass.EventKind
	var final windlass.Event
	for ev, err := range e.d.Watch(waitCtx(t, 20*time.Second), id) {
		if err != nil {
			t.Fatalf("Watch: %v (events so far %v)", err, kinds)
		}
		if ev.CallID != id {
			t.Errorf("event of call %q", ev.CallID)
		}
		kinds = append(kinds, ev.Kind)
		switch ev.Kind {
		case windlass.EventStarted:
			if ev.Attempt != 1 || ev.Worker != w.ID() {
				t.Errorf("started = %+v", ev)
			}
		case windlass.EventProgress:
			if ev.Progress == nil || ev.Progress.Fraction != 0.5 || ev.Progress.Message != "halfway" {
				t.Errorf("progress = %+v", ev.Progress)
			}
			if slices.Index(kinds, windlass.EventProgress) != len(kinds)-1 {
				break // checked at the first one
			}
			var st dispatcher.CallStatus
			fleettest.WaitFor(t, 5*time.Second, "running status with progress", func() bool {
				st, err = other.Status(t.Context(), id)
				return err == nil && st.State == dispatcher.StateRunning && st.Progress != nil
			})
			if *st.Progress != *g.progress || st.Attempt != 1 || st.Worker != w.ID() || st.Tool != "long" || st.QueuedAt.IsZero() || st.StartedAt.IsZero() {
				t.Errorf("status while running = %+v (progress %+v)", st, st.Progress)
			}
			close(g.release)
		case windlass.EventFinished:
			final = ev
		}
	}
	want := []windlass.EventKind{windlass.EventQueued, windlass.EventStarted, windlass.EventProgress}
	if len(kinds) < 4 || !slices.Equal(kinds[:3], want) || kinds[len(kinds)-1] != windlass.EventFinished {
		t.Fatalf("events = %v, want queued, started, progress…, finished", kinds)
	}
	for _, k := range kinds[3 : len(kinds)-1] {
		if k != windlass.EventProgress {
			t.Errorf("events = %v: only progress between started and finished", kinds)
		}
	}
	if final.Result == nil || final.Result.Content != "released job" || final.Attempt != 1 || final.Worker != w.ID() {
		t.Errorf("finished = %+v (result %+v)", final, final.Result)
	}
	var st dispatcher.CallStatus
	fleettest.WaitFor(t, 5*time.Second, "finished status", func() bool {
		st, err = other.Status(t.Context(), id)
		return err == nil && st.State == dispatcher.StateFinished
	})
	if st.Result == nil || st.Result.Content != "released job" || st.Worker != w.ID() {
		t.Errorf("finished status = %+v", st)
	}
}

// TestWatchAFinishedCall watches a call after it finished: the history
// comes first (queued, started, progress), then finished.
func TestWatchAFinishedCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate()
	g.progress = &windlass.Progress{Fraction: 0.25, Message: "a quarter"}
	e.startWorker(worker.Config{AckWait: 3 * time.Second, Heartbeat: 50 * time.Millisecond}, g.tool("long"))
	id, err := e.d.Submit(t.Context(), "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 5*time.Second, "progress reported", func() bool {
		st, err := e.d.Status(t.Context(), id)
		return err == nil && st.Progress != nil
	})
	close(g.release)
	storedResult(t, e.d, id)
	var kinds []windlass.EventKind
	for ev, err := range e.d.Watch(waitCtx(t, 10*time.Second), id) {
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		kinds = append(kinds, ev.Kind)
	}
	want := []windlass.EventKind{windlass.EventQueued, windlass.EventStarted, windlass.EventProgress, windlass.EventFinished}
	if !slices.Equal(kinds, want) {
		t.Errorf("events of a finished call = %v, want %v", kinds, want)
	}
}

// TestWatchAFastCall watches calls that finish within the worker's
// started delay: most store no started event (the saving), yet Watch still
// yields queued, started (from the result's StartedAt, or from the event
// when the machine was slow enough for it to go out), finished; and Status
// reports the start of the finished call.
func TestWatchAFastCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, point())
	js := e.JetStream()
	events, err := js.Stream(t.Context(), layout.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	const calls = 20
	withoutStarted := 0
	for range calls {
		r, err := e.d.Call(t.Context(), "point", nil)
		if err != nil || r.IsError {
			t.Fatalf("Call = %+v, %v", r, err)
		}
		if r.StartedAt.IsZero() || r.Worker == "" || r.Attempt != 1 {
			t.Fatalf("result of a run = %+v: want started_at, worker and attempt 1", r)
		}
		if _, err := events.GetLastMsgForSubject(t.Context(), layout.EventSubject(r.CallID, string(windlass.EventStarted))); errors.Is(err, jetstream.ErrMsgNotFound) {
			withoutStarted++
		}
		var got []windlass.Event
		for ev, err := range e.d.Watch(waitCtx(t, 10*time.Second), r.CallID) {
			if err != nil {
				t.Fatalf("Watch: %v", err)
			}
			got = append(got, ev)
		}
		kinds := make([]windlass.EventKind, len(got))
		for i, ev := range got {
			kinds[i] = ev.Kind
		}
		want := []windlass.EventKind{windlass.EventQueued, windlass.EventStarted, windlass.EventFinished}
		if !slices.Equal(kinds, want) {
			t.Fatalf("events of a fast call = %v, want %v", kinds, want)
		}
		if s := got[1]; !s.Time.Equal(r.StartedAt) || s.Attempt != 1 || s.Worker != r.Worker || s.Tool != "point" {
			t.Errorf("started = %+v, want the result's start %s on %s", s, r.StartedAt, r.Worker)
		}
		st, err := e.d.Status(t.Context(), r.CallID)
		if err != nil || st.State != dispatcher.StateFinished || !st.StartedAt.Equal(r.StartedAt) {
			t.Errorf("Status = %+v, %v: want finished, started at %s", st, err, r.StartedAt)
		}
	}
	// A no-op tool returns in microseconds; only a machine stalled for
	// 5 ms at that moment sends the event.
	if withoutStarted < calls/2 {
		t.Errorf("%d of %d fast calls stored no started event; want most", withoutStarted, calls)
	}
}

// TestSubmitWithOwnIDIsIdempotent submits one model call id many times, on
// two dispatcher instances, before and after it finished, with Submit and
// with Call: every submit names the same call, every Call returns its one
// result, and the tool runs once.
func TestSubmitWithOwnIDIsIdempotent(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	counted := windlass.MustFunc("count", func(ctx context.Context, _ struct{}) (string, error) {
		return fmt.Sprint("run ", runs.Add(1)), nil
	})
	e := newEnv(t, counted)
	other := e.another()
	e.liveIn(other, "count", "")
	const modelID = "toolu_01XyZ"

	// Concurrent first submits, on both instances.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		d := e.d
		if i%2 == 1 {
			d = other
		}
		wg.Go(func() { ids[i], errs[i] = d.Submit(t.Context(), "count", nil, dispatcher.WithCallID(modelID)) })
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != modelID || errs[i] != nil {
			t.Errorf("submit %d = %q, %v", i, ids[i], errs[i])
		}
	}
	r, err := other.Wait(waitCtx(t, 10*time.Second), modelID)
	if err != nil || r.Content != "run 1" {
		t.Fatalf("Wait = %+v, %v", r, err)
	}
	storedResult(t, e.d, modelID)
	// After it finished: the stored result, no new run.
	for i, d := range []*dispatcher.Dispatcher{e.d, other, e.d} {
		r, err := d.Call(t.Context(), "count", nil, dispatcher.WithCallID(modelID), dispatcher.WithTimeout(10*time.Second))
		if err != nil || r.Content != "run 1" || r.CallID != modelID {
			t.Errorf("Call %d after finish = %+v, %v", i, r, err)
		}
		if id, err := d.Submit(t.Context(), "count", nil, dispatcher.WithCallID(modelID)); id != modelID || err != nil {
			t.Errorf("Submit %d after finish = %q, %v", i, id, err)
		}
	}
	calls, _ := e.lastSeqs()
	if runs.Load() != 1 || calls != 1 {
		t.Errorf("the tool ran %d times; %d calls were queued: want 1 and 1", runs.Load(), calls)
	}
}

// TestFirstResultWins answers a call twice: by hand first, as a racing
// answer (a cancel, a stale worker) would, then by its worker. Call, Wait
// and Result all return the first; the worker counts its result as a
// duplicate and the dispatcher the live copy as unclaimed.
func TestFirstResultWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate()
	w, _ := e.startWorker(worker.Config{}, g.tool("slowpoke"))
	other := e.another()
	e.liveIn(other, "slowpoke", w.ID())
	const id = "answered-twice"
	type outcome struct {
		r   windlass.ToolResult
		err error
	}
	called := make(chan outcome, 1)
	go func() {
		r, err := other.Call(t.Context(), "slowpoke", map[string]string{"text": "late"}, dispatcher.WithCallID(id), dispatcher.WithTimeout(20*time.Second))
		called <- outcome{r, err}
	}()
	g.waitStarted(t, id)
	if !e.publishResult(other.ID(), windlass.ToolResult{CallID: id, Name: "slowpoke", Content: "first"}, "") {
		t.Fatal("the first result was dropped")
	}
	o := <-called
	if o.err != nil || o.r.Content != "first" {
		t.Errorf("Call = %+v, %v; want the first result", o.r, o.err)
	}
	close(g.release)
	fleettest.WaitFor(t, 10*time.Second, "the worker's answer dropped as a duplicate", func() bool { return w.Stats().DuplicateResults == 1 })
	fleettest.WaitFor(t, 5*time.Second, "the worker's answer unclaimed", func() bool { return other.Unclaimed() == 1 })
	for _, d := range []*dispatcher.Dispatcher{e.d, other} {
		if r, err := d.Wait(waitCtx(t, 5*time.Second), id); err != nil || r.Content != "first" {
			t.Errorf("Wait = %+v, %v", r, err)
		}
		if r, err := d.Result(t.Context(), id); err != nil || r.Content != "first" {
			t.Errorf("Result = %+v, %v", r, err)
		}
	}
	if s := w.Stats(); s.Completed != 1 || len(g.runs()) != 1 {
		t.Errorf("stats = %+v, runs %v", s, g.runs())
	}

	// Two stored answers (the second past the duplicate window, simulated
	// with another message id): the first is the result.
	e.publishResult(e.d.ID(), windlass.ToolResult{CallID: "stored-twice", Content: "first"}, "a")
	e.publishResult(e.d.ID(), windlass.ToolResult{CallID: "stored-twice", Content: "second"}, "b")
	for _, d := range []*dispatcher.Dispatcher{e.d, other} {
		if r, err := d.Result(t.Context(), "stored-twice"); err != nil || r.Content != "first" {
			t.Errorf("Result(stored twice) = %+v, %v", r, err)
		}
		if r, err := d.Wait(waitCtx(t, 5*time.Second), "stored-twice"); err != nil || r.Content != "first" {
			t.Errorf("Wait(stored twice) = %+v, %v", r, err)
		}
	}
}

// TestConcurrentCallsWithOneIDShareTheResult makes the same call (one model
// call id) twice at once on one instance, as a caller retrying a Call that
// is still in flight would: both get the one execution's result.
func TestConcurrentCallsWithOneIDShareTheResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate()
	e.startWorker(worker.Config{}, g.tool("slowpoke"))
	const id = "toolu_inflight"
	results := make(chan windlass.ToolResult, 2)
	call := func() {
		r, err := e.d.Call(t.Context(), "slowpoke", map[string]string{"text": "once"}, dispatcher.WithCallID(id), dispatcher.WithTimeout(20*time.Second))
		if err != nil {
			t.Errorf("Call = %v", err)
		}
		results <- r
	}
	go call()
	g.waitStarted(t, id)
	go call()
	// The second call is in flight too before the tool finishes: it waits
	// for the same answer (an early refusal would arrive here first).
	got := 0
	select {
	case r := <-results:
		t.Errorf("a Call returned while the tool still ran: %+v", r)
		got++
	case <-time.After(300 * time.Millisecond):
	}
	close(g.release)
	for ; got < 2; got++ {
		if r := <-results; r.IsError || r.Content != "released once" || r.CallID != id {
			t.Errorf("Call = %+v", r)
		}
	}
	if runs := g.runs(); len(runs) != 1 {
		t.Errorf("ran %d times: %v", len(runs), runs)
	}
}

// TestReplaysOfOneRecordAtOnceAreOneCall: two replays of one dead record
// at the same moment (an operator's command run again because it seemed
// to hang, two operators) both succeed with the same call id, and the
// call runs once. Before, each submitted under a random id of its own and
// the dead call ran twice; the second's deletion of the record, already
// gone, failed with the server's "no message found". (Found by a review
// helper.)
func TestReplaysOfOneRecordAtOnceAreOneCall(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEnv(t, countingCharge(&runs))
	seq := e.publishDead("dead-charge-1", windlass.CallError{Code: windlass.CodeWorkerLost, Message: "lost"})
	var ids [2]string
	var errs [2]error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			<-start
			ids[i], errs[i] = e.d.Replay(t.Context(), seq, dispatcher.WithTimeout(10*time.Second))
		})
	}
	close(start)
	wg.Wait()
	for i := range ids {
		if errs[i] != nil && !errors.Is(errs[i], dispatcher.ErrNoDeadCall) {
			t.Errorf("replay %d = %q, %v", i, ids[i], errs[i])
		}
	}
	if ids[0] != "" && ids[1] != "" && ids[0] != ids[1] {
		t.Errorf("the replays are two calls, %q and %q; want one", ids[0], ids[1])
	}
	id := cmp.Or(ids[0], ids[1])
	if r, err := e.d.Wait(waitCtx(t, 10*time.Second), id); err != nil || r.IsError {
		t.Fatalf("Wait(%q) = %+v, %v", id, r, err)
	}
	if _, err := e.d.Replay(t.Context(), seq); !errors.Is(err, dispatcher.ErrNoDeadCall) {
		t.Errorf("a third replay = %v; want ErrNoDeadCall: the record is deleted", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the dead call ran %d times; want once", n)
	}
}

// TestADeadCallAnsweredSinceIsNotReplayed: a worker records a dead call
// before it stores the call's error answer; when that store fails the
// call is delivered again and may succeed. Replaying its record would run
// a call that succeeded a second time: the replay is refused
// (ErrAnsweredSince) and the stale record deleted. A record whose call's
// answer is an error replays as before. Before, both were replayed.
func TestADeadCallAnsweredSinceIsNotReplayed(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEnv(t, countingCharge(&runs))
	down := windlass.CallError{Code: windlass.CodeUnavailable, Message: "down", Retryable: true}
	deadRecord := func(id string) uint64 { return e.publishDead(id, down) }
	succeeded := deadRecord("charge-succeeded-since")
	e.publishResult(e.d.ID(), windlass.ToolResult{CallID: "charge-succeeded-since", Name: "charge", Content: "charged", Attempt: 4, Worker: "w2"}, "")
	id, err := e.d.Replay(t.Context(), succeeded)
	if !errors.Is(err, dispatcher.ErrAnsweredSince) || id != "" {
		t.Errorf("Replay of a call that succeeded since = %q, %v; want ErrAnsweredSince", id, err)
	}
	if _, err := e.d.Replay(t.Context(), succeeded); !errors.Is(err, dispatcher.ErrNoDeadCall) {
		t.Errorf("a second replay = %v; want ErrNoDeadCall: the stale record is deleted", err)
	}

	failed := deadRecord("charge-failed")
	e.publishResult(e.d.ID(), windlass.ToolResult{CallID: "charge-failed", Name: "charge", IsError: true, Content: "down",
		Error: &windlass.CallError{Code: windlass.CodeUnavailable, Message: "down", Retryable: true}}, "")
	id, err = e.d.Replay(t.Context(), failed, dispatcher.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("Replay of a call that failed = %q, %v", id, err)
	}
	if r, err := e.d.Wait(waitCtx(t, 10*time.Second), id); err != nil || r.IsError {
		t.Fatalf("Wait(%q) = %+v, %v", id, r, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once, for the replay of the call that failed", n)
	}
}

// TestADeadCallStillQueuedIsNotReplayed: a worker records a dead call
// before it stores the call's error answer; when that store fails, the
// call stays in the work queue and is delivered again after the ack wait.
// A replay in that window would run beside that delivery: it is refused
// unavailable, and the record kept for later. Here the call is running
// (its message is in the stream while it runs). Before, the replay ran it
// a second time. (Found by a review helper.)
func TestADeadCallStillQueuedIsNotReplayed(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	tool := windlass.MustFunc("charge", func(ctx context.Context, _ struct{}) (string, error) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		return "charged", nil
	})
	e := newEnv(t, tool)
	id, err := e.d.Submit(t.Context(), "charge", `{}`, dispatcher.WithCallID("dead-but-queued"))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	defer close(release)
	seq := e.publishDead(id, windlass.CallError{Code: windlass.CodeUnavailable, Message: "down", Retryable: true})
	for range 2 { // refused, and the record kept
		if newID, err := e.d.Replay(t.Context(), seq); !errors.Is(err, dispatcher.ErrUnavailable) || newID != "" {
			t.Fatalf("Replay of a dead call still in the work queue = %q, %v; want ErrUnavailable", newID, err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once", n)
	}
}

// countingCharge is the tool "charge", counting its runs in runs.
func countingCharge(runs *atomic.Int64) windlass.Tool {
	return windlass.MustFunc("charge", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		return "charged", nil
	})
}

// publishDead stores a dead record of call id of tool "charge", dead of
// cause, as a worker does, and returns its sequence.
func (e *env) publishDead(id string, cause windlass.CallError) uint64 {
	e.t.Helper()
	dc := windlass.DeadCall{Call: windlass.ToolCall{ID: id, Name: "charge", Arguments: json.RawMessage(`{}`)},
		Error: cause, Deliveries: 3, DiedAt: time.Now(), Origin: e.d.ID()}
	data, _ := json.Marshal(dc)
	ack, err := e.JetStream().Publish(e.t.Context(), layout.DeadSubject("charge"), data)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}
