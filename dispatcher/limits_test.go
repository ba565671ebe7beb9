package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/worker"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// refusedWith reports err's code and retry-after when it is a refusal by
// a limit.
func refusedWith(err error) (windlass.ErrorCode, time.Duration) {
	var ce *windlass.CallError
	if !errors.As(err, &ce) {
		return "", 0
	}
	return ce.Code, ce.RetryAfter()
}

// TestReplicasShareAKeysRate: two dispatcher replicas enforce one rate
// per tool × key between them: the sum of what both admit, not each's.
func TestReplicasShareAKeysRate(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	echo := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	f.StartWorker(worker.Config{}, echo)
	// 4 calls at once, then one a minute: within this test, 4 in all.
	cfg := dispatcher.Config{Limits: limits.Config{Keys: map[string]limits.Limit{"acme": {Rate: limits.PerMinute(1).WithBurst(4)}}}}
	a, b := f.Dispatcher(cfg), f.Dispatcher(cfg)
	fleettest.WaitCatalog(t, a, "echo")
	fleettest.WaitCatalog(t, b, "echo")

	start := time.Now()
	admitted, refused := 0, 0
	for i := range 12 {
		d := []*dispatcher.Dispatcher{a, b}[i%2]
		_, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"))
		switch code, after := refusedWith(err); {
		case err == nil:
			admitted++
		case code == windlass.CodeRateLimited && after > 0:
			refused++
		default:
			t.Fatalf("submit %d: %v (code %q, retry after %s), want admitted or rate_limited with a retry-after", i, err, code, after)
		}
	}
	if elapsed := time.Since(start); elapsed < time.Minute && (admitted != 4 || refused != 8) {
		t.Errorf("two replicas admitted %d and refused %d of 12 calls of key acme in %s; want 4 and 8 (the key's burst, shared)", admitted, refused, elapsed)
	}
	// Another key is not charged for acme's calls.
	if _, err := b.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("other")); err != nil {
		t.Errorf("another key's call: %v, want admitted", err)
	}
	// Call, not only Submit, carries the advice in its result.
	r, err := a.Call(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"))
	if err != nil || r.Code() != windlass.CodeRateLimited || r.Error.RetryAfter() <= 0 || !r.Error.Retryable {
		t.Errorf("Call over the rate = %+v, %v; want a rate_limited result, retryable, with a retry-after", r.Error, err)
	}
}

// blockingWork is the tool "work": a call with {"block":true} counts
// itself in started and waits until release is closed (or its context
// ends); {"block":false} answers at once.
func blockingWork(release <-chan struct{}, started *atomic.Int64) windlass.Tool {
	return windlass.MustFunc("work", func(ctx context.Context, in struct {
		Block bool `json:"block"`
	}) (string, error) {
		if in.Block {
			started.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "done", nil
	})
}

// TestFloodingKeyIsRefusedOthersAreServed: a key that floods a tool is
// refused past its cap of calls in flight, while another key's call of
// the same tool is admitted and answered at once; when the flood's calls
// end, their slots are free again.
func TestFloodingKeyIsRefusedOthersAreServed(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	release := make(chan struct{})
	var started atomic.Int64
	work := blockingWork(release, &started)
	f.StartWorker(worker.Config{MaxConcurrency: 16}, work)
	const capacity = 5
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: capacity}}})
	fleettest.WaitCatalog(t, d, "work")

	var flood []string
	refused := 0
	for i := range 40 {
		id, err := d.Submit(t.Context(), "work", `{"block":true}`, dispatcher.WithKey("flood"))
		switch code, _ := refusedWith(err); {
		case err == nil:
			flood = append(flood, id)
		case code == windlass.CodeRateLimited:
			refused++
		default:
			t.Fatalf("flood submit %d: %v", i, err)
		}
	}
	if len(flood) != capacity || refused != 40-capacity {
		t.Fatalf("flood: %d admitted, %d refused; want %d and %d", len(flood), refused, capacity, 40-capacity)
	}
	fleettest.WaitFor(t, 30*time.Second, "the flood's calls running", func() bool { return started.Load() == capacity })

	// Another tenant is admitted and answered while the flood holds its cap.
	const bound = 10 * time.Second // a call of an instant tool, on a loaded machine
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	begin := time.Now()
	r, err := d.Call(ctx, "work", `{"block":false}`, dispatcher.WithKey("calm"))
	if err != nil || r.IsError {
		t.Fatalf("the other key's call = %+v, %v; want answered", r, err)
	}
	t.Logf("the other key's call was answered in %s while the flood held its cap", time.Since(begin))

	// The flood's calls end: their slots are freed by their results.
	close(release)
	for _, id := range flood {
		if _, err := d.Wait(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	fleettest.WaitFor(t, 30*time.Second, "the flood key admitted again after its calls ended", func() bool {
		_, err := d.Submit(t.Context(), "work", `{"block":false}`, dispatcher.WithKey("flood"))
		return err == nil
	})
}

// TestToolCapIsOverloaded: past a tool's cap of calls queued or running,
// all keys together, a call is refused overloaded, and nothing of it is
// stored: its id is unknown to the fleet.
func TestToolCapIsOverloaded(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	w := f.StartWorker(worker.Config{}, e)
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Tools: map[string]limits.ToolLimits{"echo": {MaxQueued: 3}}}})
	fleettest.WaitCatalog(t, d, "echo")
	if err := w.Stop(); err != nil { // the calls stay queued
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey(fmt.Sprintf("k%d", i)), dispatcher.AllowNoWorker()); err != nil {
			t.Fatalf("call %d under the tool's cap: %v", i, err)
		}
	}
	_, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("k9"), dispatcher.WithCallID("over-the-cap"), dispatcher.AllowNoWorker())
	if code, after := refusedWith(err); code != windlass.CodeOverloaded || after <= 0 {
		t.Fatalf("a 4th call of the tool = %v; want overloaded with a retry-after", err)
	}
	st, err := d.Status(t.Context(), "over-the-cap")
	if err != nil || st.State != dispatcher.StateUnknown {
		t.Errorf("status of the refused call = %+v, %v; want unknown (nothing stored)", st, err)
	}
}

// TestResubmitHoldsOneSlot: submitting the same call id again is the
// same call: admitted without a second slot.
func TestResubmitHoldsOneSlot(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	w := f.StartWorker(worker.Config{}, e)
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: 1}}})
	fleettest.WaitCatalog(t, d, "echo")
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithCallID("same"), dispatcher.AllowNoWorker()); err != nil {
			t.Fatalf("submit %d of the same call: %v", i, err)
		}
	}
	if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.AllowNoWorker()); err == nil {
		t.Error("a second call under a cap of 1 was admitted")
	}
}

// TestAdmissionFailsOpenWithoutRedis: while Redis is unreachable the
// admission limits are not enforced: calls are admitted (the documented
// policy), not refused or failed.
func TestAdmissionFailsOpenWithoutRedis(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	f.StartWorker(worker.Config{}, e)
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: 1, Rate: limits.PerMinute(1)}}})
	fleettest.WaitCatalog(t, d, "echo")
	f.Redis.Stop()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		begin := time.Now()
		r, err := d.Call(ctx, "echo", `{}`, dispatcher.AllowNoWorker())
		cancel()
		if err != nil || r.IsError {
			t.Fatalf("call %d with Redis down = %+v, %v; want admitted and answered (admission fails open)", i, r.Error, err)
		}
		t.Logf("call %d with Redis down answered in %s", i, time.Since(begin))
	}
}

// TestInvalidKeyIsRefused: a key that breaks the rule is refused
// invalid_call, naming the rule.
func TestInvalidKeyIsRefused(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	f.StartWorker(worker.Config{}, e)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "echo")
	_, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("two words"))
	var ce *windlass.CallError
	if !errors.As(err, &ce) || ce.Code != windlass.CodeInvalidCall || ce.Message == "" {
		t.Fatalf("a key with a space = %v; want invalid_call naming the rule", err)
	}
	t.Log(ce.Message)
}

// TestKeyIsSeen: a call's key is in its status (queued, and finished),
// in its events and in the metrics, with refusals by reason.
func TestKeyIsSeen(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	w := f.StartWorker(worker.Config{}, e)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	d := f.Dispatcher(dispatcher.Config{MeterProvider: mp, Limits: limits.Config{Keys: map[string]limits.Limit{"acme": {MaxInFlight: 1}}}})
	fleettest.WaitCatalog(t, d, "echo")

	r, err := d.Call(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"), dispatcher.WithCallID("keyed-1"))
	if err != nil || r.IsError {
		t.Fatal(r, err)
	}
	if st, err := d.Status(t.Context(), "keyed-1"); err != nil || st.State != dispatcher.StateFinished || st.Key != "acme" {
		t.Errorf("status of a finished call = %+v, %v; want finished, key acme", st, err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"), dispatcher.WithCallID("keyed-2"), dispatcher.AllowNoWorker()); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Status(t.Context(), "keyed-2"); err != nil || st.State != dispatcher.StateQueued || st.Key != "acme" {
		t.Errorf("status of a queued call = %+v, %v; want queued, key acme", st, err)
	}
	for ev, err := range d.Watch(t.Context(), "keyed-2") {
		if err != nil || ev.Kind != windlass.EventQueued || ev.Key != "acme" {
			t.Errorf("the queued call's first event = %+v, %v; want queued with key acme", ev, err)
		}
		break
	}
	if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"), dispatcher.AllowNoWorker()); err == nil {
		t.Fatal("a second call of acme under its cap of 1 was admitted")
	}
	fs, err := d.Fleet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.Tools) != 1 || fs.Tools[0].Limits == nil || fs.Tools[0].Limits.Keys["acme"] != (dispatcher.KeyLimitStatus{Rate: "none", MaxInFlight: 1, InFlight: 1}) ||
		fs.Tools[0].Limits.InFlight != 1 || fs.Tools[0].Limits.MaxQueued != limits.DefaultMaxQueued {
		t.Errorf("fleet status of echo's limits = %+v; want acme 1 in flight of 1, the tool 1 of %d", fs.Tools[0].Limits, limits.DefaultMaxQueued)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if data, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range data.DataPoints {
					key, _ := p.Attributes.Value("key")
					reason, _ := p.Attributes.Value("reason")
					outcome, _ := p.Attributes.Value("outcome")
					seen[m.Name+"/"+outcome.AsString()+reason.AsString()] = key.AsString()
				}
			}
		}
	}
	for name, key := range map[string]string{
		"windlass.dispatcher.calls/ok":                 "acme",
		"windlass.dispatcher.calls/rate_limited":       "acme",
		"windlass.dispatcher.limits.refused/in_flight": "acme",
	} {
		if seen[name] != key {
			t.Errorf("metric %s: key %q, want %q (seen: %v)", name, seen[name], key, seen)
		}
	}
}

// TestCapHoldsUnderConcurrentSubmits: calls submitted at once, far from
// the cap and then up to it, are admitted up to the key's cap exactly by
// one dispatcher (admitting without asking Redis while it is far from the
// cap), and by two with at most a quarter of the cap more (calls the
// other admitted without asking in the same round trip); every slot
// taken is counted.
func TestCapHoldsUnderConcurrentSubmits(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	w := f.StartWorker(worker.Config{}, e)
	const capacity = 40
	cfg := dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: capacity}}}
	a, b := f.Dispatcher(cfg), f.Dispatcher(cfg)
	fleettest.WaitCatalog(t, a, "echo")
	fleettest.WaitCatalog(t, b, "echo")
	if err := w.Stop(); err != nil { // the calls stay queued, holding their slots
		t.Fatal(err)
	}
	submit := func(key string, ds ...*dispatcher.Dispatcher) int {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := range 16 {
			d := ds[i%len(ds)]
			wg.Go(func() {
				for range 10 {
					_, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey(key), dispatcher.AllowNoWorker())
					switch code, _ := refusedWith(err); {
					case err == nil:
						admitted.Add(1)
					case code != windlass.CodeRateLimited:
						t.Errorf("submit: %v", err)
					}
				}
			})
		}
		wg.Wait()
		return int(admitted.Load())
	}
	used := func(key string) int {
		fs, err := a.Fleet(t.Context())
		if err != nil || len(fs.Tools) != 1 || fs.Tools[0].Limits == nil {
			t.Fatalf("fleet status: %+v, %v", fs, err)
		}
		return fs.Tools[0].Limits.Keys[key].InFlight
	}
	if n := submit("one", a); n != capacity {
		t.Errorf("one dispatcher admitted %d of 160 concurrent calls under a cap of %d; want exactly the cap", n, capacity)
	}
	fleettest.WaitFor(t, 10*time.Second, "the slots of key one recorded", func() bool { return used("one") == capacity })
	n := submit("two", a, b)
	if n < capacity || n > capacity+capacity/4 {
		t.Errorf("two dispatchers admitted %d of 160 concurrent calls under a cap of %d; want from %d to %d", n, capacity, capacity, capacity+capacity/4)
	}
	t.Logf("two dispatchers admitted %d under a cap of %d", n, capacity)
	fleettest.WaitFor(t, 10*time.Second, "the slots of key two recorded", func() bool { return used("two") == n })
}

// TestSlotIsFreedWhereverTheCallEnds: a call's admission slot is freed
// once its answer is stored, by whoever stores it, not only by the
// dispatcher that admitted it. A dispatcher that submits a call and goes
// away (a CLI's call --async) leaves no slot held until long after the
// call's deadline: another dispatcher admits the key's next call as soon
// as the first has ended.
func TestSlotIsFreedWhereverTheCallEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// noWorker: the call stays queued, with no worker to run it.
		noWorker bool
		// end ends the call id that a dispatcher, now closed, admitted;
		// b is another dispatcher of the fleet.
		end func(t *testing.T, b *dispatcher.Dispatcher, id string, release chan struct{})
	}{
		{name: "answered by its worker", end: func(t *testing.T, b *dispatcher.Dispatcher, id string, release chan struct{}) {
			close(release)
		}},
		{name: "canceled through another dispatcher while queued", noWorker: true, end: func(t *testing.T, b *dispatcher.Dispatcher, id string, release chan struct{}) {
			if err := b.Cancel(t.Context(), id, "not needed any more"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fleettest.New(t)
			release := make(chan struct{})
			var started atomic.Int64
			work := blockingWork(release, &started)
			w := f.StartWorker(worker.Config{}, work)
			cfg := dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: 1}}}
			a, b := f.Dispatcher(cfg), f.Dispatcher(cfg)
			fleettest.WaitCatalog(t, a, "work")
			fleettest.WaitCatalog(t, b, "work")
			if tc.noWorker {
				if err := w.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			// Its slot would lapse 11 minutes from now, long after the
			// test's bound below.
			id, err := a.Submit(t.Context(), "work", `{"block":true}`, dispatcher.WithKey("tenant"),
				dispatcher.WithTimeout(10*time.Minute), dispatcher.AllowNoWorker())
			if err != nil {
				t.Fatal(err)
			}
			if !tc.noWorker {
				fleettest.WaitFor(t, 30*time.Second, "the call running", func() bool { return started.Load() == 1 })
			}
			if err := a.Close(); err != nil { // the dispatcher that admitted it is gone
				t.Fatal(err)
			}
			_, err = b.Submit(t.Context(), "work", `{"block":false}`, dispatcher.WithKey("tenant"), dispatcher.AllowNoWorker())
			if code, _ := refusedWith(err); code != windlass.CodeRateLimited {
				t.Fatalf("a second call of the key while the first holds its slot = %v; want rate_limited", err)
			}

			tc.end(t, b, id, release)
			if _, err := b.Wait(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			const bound = 20 * time.Second // the free is written behind the answer; a loaded machine
			begin := time.Now()
			fleettest.WaitFor(t, bound, "the key's next call admitted by another dispatcher", func() bool {
				_, err := b.Submit(t.Context(), "work", `{"block":false}`, dispatcher.WithKey("tenant"), dispatcher.AllowNoWorker())
				return err == nil
			})
			t.Logf("the key's next call was admitted %s after the first call's answer", time.Since(begin))
		})
	}
}

// TestSmallCapHoldsUnderConcurrentSubmits: a cap small beside the calls
// submitted at once holds exactly for one dispatcher: calls that find it
// far from the cap at the same moment, and wait for their rate, cannot
// all be admitted without asking (each claims its room under one lock).
func TestSmallCapHoldsUnderConcurrentSubmits(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	e := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	w := f.StartWorker(worker.Config{}, e)
	const capacity = 8
	// With a rate too (never refusing), whose charge is asked between
	// finding room and taking it.
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: capacity, Rate: limits.PerSecond(limits.MaxEvents)}}})
	fleettest.WaitCatalog(t, d, "echo")
	if err := w.Stop(); err != nil { // the calls stay queued, holding their slots
		t.Fatal(err)
	}
	// One call asks first: the count it brings back is fresh, far from
	// the cap (1 of 8), and the next calls may be admitted without asking.
	if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.AllowNoWorker()); err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int64
	admitted.Add(1)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			<-start
			_, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.AllowNoWorker())
			switch code, _ := refusedWith(err); {
			case err == nil:
				admitted.Add(1)
			case code != windlass.CodeRateLimited:
				t.Errorf("submit: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := admitted.Load(); n != capacity {
		t.Errorf("one dispatcher admitted %d of 65 calls under a cap of %d; want exactly the cap", n, capacity)
	}
}
