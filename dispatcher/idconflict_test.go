package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/windlass-dev/windlass/worker"
)

// TestOneIDIsOneCall: a call id the caller chose names one call — one
// tool, one set of arguments. Submitting it again with the same tool and
// arguments (in any key order or spacing) is that call, run once; with
// another tool or other arguments it is refused id_conflict, naming the id
// and what differs, never answered with the other call's result: on the
// same instance while the first is in flight, on another instance, after
// it finished, and when two different submits race.
func TestOneIDIsOneCall(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	add := windlass.MustFunc("add", func(ctx context.Context, in struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}) (float64, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond) // in flight while the retries arrive
		return in.A + in.B, nil
	})
	echo := windlass.MustFunc("echo", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	e := newEnv(t, add, echo)
	other := e.another()
	e.liveIn(other, "add", "")
	e.liveIn(other, "echo", "")

	isConflict := func(err error, want string) bool {
		var ce *windlass.CallError
		return errors.As(err, &ce) && ce.Code == windlass.CodeIDConflict && strings.Contains(ce.Message, `"sum-1"`) && strings.Contains(ce.Message, want)
	}
	if _, err := e.d.Submit(t.Context(), "add", `{"a":1,"b":2}`, dispatcher.WithCallID("sum-1")); err != nil {
		t.Fatal(err)
	}
	// The same call, written otherwise, from both instances.
	for i, d := range []*dispatcher.Dispatcher{e.d, other} {
		if id, err := d.Submit(t.Context(), "add", `{ "b": 2, "a": 1 }`, dispatcher.WithCallID("sum-1")); id != "sum-1" || err != nil {
			t.Errorf("resubmit %d, same arguments reordered = %q, %v", i, id, err)
		}
	}
	// Other arguments, another tool: not this call.
	for i, d := range []*dispatcher.Dispatcher{e.d, other} {
		if _, err := d.Submit(t.Context(), "add", `{"a":1,"b":3}`, dispatcher.WithCallID("sum-1")); !isConflict(err, "other arguments") {
			t.Errorf("instance %d, other arguments: %v, want id_conflict naming the id and the arguments", i, err)
		}
		if _, err := d.Submit(t.Context(), "echo", `{"text":"hi"}`, dispatcher.WithCallID("sum-1")); !isConflict(err, `tool "add", not "echo"`) {
			t.Errorf("instance %d, another tool: %v, want id_conflict naming the tools", i, err)
		}
	}
	// Call on the instance where the first is waiting, and after it finished.
	r, err := e.d.Call(t.Context(), "add", `{"a":5,"b":5}`, dispatcher.WithCallID("sum-1"))
	if err != nil || r.Code() != windlass.CodeIDConflict {
		t.Errorf("Call with other arguments = %+v, %v; want an id_conflict result", r, err)
	}
	if r, err := other.Wait(waitCtx(t, 10*time.Second), "sum-1"); err != nil || r.Content != "3" {
		t.Fatalf("the call's result = %+v, %v", r, err)
	}
	if r, err := other.Call(t.Context(), "add", `{"a":9,"b":9}`, dispatcher.WithCallID("sum-1")); err != nil || r.Code() != windlass.CodeIDConflict || r.Content == "3" {
		t.Errorf("Call after it finished, other arguments = %+v, %v; want id_conflict, not its result", r, err)
	}
	if r, err := other.Call(t.Context(), "add", `{"b":2,"a":1}`, dispatcher.WithCallID("sum-1")); err != nil || r.Content != "3" {
		t.Errorf("Call after it finished, same arguments = %+v, %v; want its result", r, err)
	}

	// Two different calls race for a new id: one is accepted, the other
	// refused, and the accepted one's answer is its own.
	for round := range 5 {
		id := fmt.Sprint("race-", round)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, d := range []*dispatcher.Dispatcher{e.d, other} {
			wg.Go(func() {
				_, errs[i] = d.Submit(t.Context(), "add", fmt.Sprintf(`{"a":%d,"b":0}`, 10+i), dispatcher.WithCallID(id))
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			var ce *windlass.CallError
			switch {
			case err == nil && won == -1:
				won = i
			case errors.As(err, &ce) && ce.Code == windlass.CodeIDConflict:
			default:
				t.Errorf("round %d, submit %d: %v; want one accepted, one id_conflict", round, i, err)
			}
		}
		if won == -1 {
			t.Errorf("round %d: both refused (%v)", round, errs)
			continue
		}
		if r, err := e.d.Wait(waitCtx(t, 10*time.Second), id); err != nil || r.Content != fmt.Sprint(10+won) {
			t.Errorf("round %d: the accepted call answered %+v, %v; want %d", round, r, err, 10+won)
		}
	}
	if n := runs.Load(); n != 6 {
		t.Errorf("add ran %d times, want 6 (sum-1 once, each race once)", n)
	}
}

// TestResultTooLargeReachesTheCaller: a tool whose result is over its
// worker's limit for results by reference is answered result_too_large at
// once — Call and Wait on another instance get it long before the call's
// deadline — and the tool runs once.
func TestResultTooLargeReachesTheCaller(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	big := windlass.MustFunc("big", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		return strings.Repeat("x", 2<<20), nil
	})
	e := newEnv(t)
	e.StartWorker(worker.Config{PayloadLimit: 1 << 20}, big)
	fleettest.WaitCatalog(t, e.d, "big")
	other := e.another()
	e.liveIn(other, "big", "")
	start := time.Now()
	r, err := e.d.Call(t.Context(), "big", nil, dispatcher.WithCallID("big-1"), dispatcher.WithTimeout(time.Minute))
	if err != nil || r.Code() != windlass.CodeResultTooLarge || !strings.Contains(r.Content, "over the limit of 1048576 bytes") {
		t.Fatalf("Call = %.300q, %v; want result_too_large", r.Content, err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the answer took %s", took)
	}
	if w, err := other.Wait(waitCtx(t, 10*time.Second), "big-1"); err != nil || w.Code() != windlass.CodeResultTooLarge {
		t.Errorf("Wait on another instance = %.300q, %v", w.Content, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}

// lostAckJS fails the first publish of a call as a lost acknowledgement
// would, after running before (another submit of the id, racing it): a
// mock, because a real server does not lose one acknowledgement on demand.
type lostAckJS struct {
	jetstream.JetStream
	once   atomic.Bool
	before func()
}

func (l *lostAckJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, "windlass.call.") && l.once.CompareAndSwap(false, true) {
		l.before()
		return nil, nats.ErrTimeout
	}
	return l.JetStream.PublishMsg(ctx, m, opts...)
}

// TestRetriedPublishStillChecksTheID: two submits of one id with other
// arguments race, and the second one's first publish is not acknowledged.
// Its retry is reported duplicate, which looks like its own earlier
// attempt; the queued record, written create-only by the first submit,
// says it is not: the second is refused id_conflict, and the first
// caller's retry is still the first call. (The retry used to be taken as
// its own, its record replaced the first's: the second caller got the
// first call's result and the first caller's retry was refused.)
func TestRetriedPublishStillChecksTheID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, countingAdd(new(atomic.Int64)))
	other := e.another()
	e.liveIn(other, "add", "")
	dispatcher.WrapJetStream(other, func(js jetstream.JetStream) jetstream.JetStream {
		return &lostAckJS{JetStream: js, before: func() {
			if _, err := e.d.Submit(t.Context(), "add", `{"a":1,"b":2}`, dispatcher.WithCallID("x")); err != nil {
				t.Errorf("first submit: %v", err)
			}
		}}
	})
	var ce *windlass.CallError
	if _, err := other.Submit(t.Context(), "add", `{"a":1,"b":3}`, dispatcher.WithCallID("x")); !errors.As(err, &ce) || ce.Code != windlass.CodeIDConflict {
		t.Errorf("second submit, other arguments, its publish retried: %v, want id_conflict", err)
	}
	if _, err := e.d.Submit(t.Context(), "add", `{"b":2,"a":1}`, dispatcher.WithCallID("x")); err != nil {
		t.Errorf("the first caller's retry (same tool, same arguments): %v", err)
	}
	if r, err := e.d.Wait(waitCtx(t, 10*time.Second), "x"); err != nil || r.Content != "3" {
		t.Errorf("the call's result = %+v, %v; want 1+2", r, err)
	}
}

// countingAdd is the tool "add" (a + b), counting its runs in runs.
func countingAdd(runs *atomic.Int64) windlass.Tool {
	return windlass.MustFunc("add", func(ctx context.Context, in struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}) (float64, error) {
		runs.Add(1)
		return in.A + in.B, nil
	})
}
