package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/demotools"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// topologyFleet is a whole fleet on one Redis deployment: a worker serving
// add, a gated transfer_funds and a blocking hold tool; the approval
// service; a dispatcher with a cap on key "tenant" of hold.
type topologyFleet struct {
	*fleettest.Fleet
	d   *dispatcher.Dispatcher
	svc *approval.Service

	mu      sync.Mutex
	runs    map[string]int // executions by call id, of every tool
	release chan struct{}  // closed: the hold calls return
}

// holdCap is the cap of key "tenant" on the hold tool.
const holdCap = 2

func newTopologyFleet(t *testing.T, opts ...fleettest.Option) *topologyFleet {
	t.Helper()
	tf := &topologyFleet{Fleet: newFleet(t, opts...), runs: map[string]int{}, release: make(chan struct{})}
	ran := func(ctx context.Context) {
		info, _ := windlass.CallInfoFromContext(ctx)
		tf.mu.Lock()
		tf.runs[info.ID]++
		tf.mu.Unlock()
	}
	add := windlass.MustFunc("add", func(ctx context.Context, in demotools.AddArgs) (float64, error) {
		ran(ctx)
		return in.A + in.B, nil
	})
	pay := windlass.MustFunc("transfer_funds", func(ctx context.Context, in demotools.TransferArgs) (string, error) {
		ran(ctx)
		return "sent", nil
	}, windlass.WithApproval())
	hold := windlass.MustFunc("hold", func(ctx context.Context, in struct{}) (string, error) {
		ran(ctx)
		select {
		case <-tf.release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	priv, pub, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	privKey, _ := release.ParsePrivateKey(priv)
	pubKey, _ := release.ParsePublicKey(pub)
	tf.StartWorker(worker.Config{Releases: release.NewVerifier(pubKey), MaxConcurrency: 64}, add, pay, hold)

	// With a replica, as deployed on Sentinel: a hold counts once the
	// replica has it, so a failover cannot lose a held call.
	replicaAcks := 0
	if tf.RedisSentinel != nil {
		replicaAcks = 1
	}
	tf.svc, err = approval.New(approval.Config{Conn: tf.Conn(), Redis: tf.RedisClient(), Registry: tf.NewRegistry(),
		Signer: release.NewSigner(privKey), ReplicaAcks: replicaAcks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svcDone := make(chan error, 1)
	go func() { svcDone <- tf.svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-svcDone; err != nil {
			t.Errorf("approval service: Run = %v", err)
		}
	})
	tf.d = tf.Dispatcher(dispatcher.Config{Limits: limits.Config{
		Tools: map[string]limits.ToolLimits{"hold": {Keys: map[string]limits.Limit{"tenant": {MaxInFlight: holdCap}}}},
	}})
	fleettest.WaitCatalog(t, tf.d, "add", "hold", "transfer_funds")
	return tf
}

// runCount is how many times the call ran.
func (tf *topologyFleet) runCount(id string) int {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	return tf.runs[id]
}

// held waits until the approval service holds the call, pending.
func (tf *topologyFleet) held(t *testing.T, id string, within time.Duration) *approval.HeldCall {
	t.Helper()
	var h *approval.HeldCall
	fleettest.WaitFor(t, within, "call "+id+" held", func() bool {
		var err error
		h, err = tf.svc.Get(t.Context(), id)
		return err == nil && h.Status == approval.StatusPending
	})
	return h
}

// approveAndWait approves a held call and waits for its result.
// A reviewer whose approval fails (Redis unreachable for a moment while
// the client learns the new master; a release not yet on a replica) tries
// again, as one would; an approval that was recorded by an earlier try,
// or a release left for the service's next pass, is waited for.
func (tf *topologyFleet) approveAndWait(t *testing.T, h *approval.HeldCall) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		_, err := tf.svc.Approve(ctx, h.ID, "alice", h.ArgsHash, nil)
		var decided *approval.DecidedError
		if err == nil || errors.As(err, &decided) && decided.Call.Status == approval.StatusApproved || errors.Is(err, approval.ErrNotReplicated) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("approve %s: %v", h.ID, err)
		}
		t.Logf("approve %s: %v; trying again", h.ID, err)
		time.Sleep(fleettest.PollInterval)
	}
	r, err := tf.d.Wait(ctx, h.ID)
	if err != nil || r.IsError || r.Content != "sent" {
		t.Fatalf("result of the approved call %s: %+v, %v; want sent", h.ID, r, err)
	}
}

// TestFleetOnRedisTopologies runs the whole fleet on a three-master Redis
// Cluster and on a Sentinel set: the worker advertises, the dispatcher
// calls and gets the answer, a gated call is held by the approval service
// and runs once after approval, and the limits refuse a key past its cap
// and admit it again once its calls end.
func TestFleetOnRedisTopologies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  fleettest.Option
	}{
		{"cluster", fleettest.WithRedisCluster(3)},
		{"sentinel", fleettest.WithRedisSentinel()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tf := newTopologyFleet(t, tc.opt)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			r, err := tf.d.Call(ctx, "add", map[string]any{"a": 1, "b": 2})
			if err != nil || r.IsError || r.Content != "3" {
				t.Fatalf("add = %+v, %v; want 3", r, err)
			}

			id, err := tf.d.Submit(ctx, "transfer_funds", map[string]any{"to": "bob", "amount": 5})
			if err != nil {
				t.Fatal(err)
			}
			h := tf.held(t, id, 30*time.Second)
			if n := tf.runCount(id); n != 0 {
				t.Fatalf("the gated call ran %d times before approval", n)
			}
			tf.approveAndWait(t, h)
			if n := tf.runCount(id); n != 1 {
				t.Errorf("the approved call ran %d times, want 1", n)
			}

			var holds []string
			for range holdCap {
				id, err := tf.d.Submit(ctx, "hold", `{}`, dispatcher.WithKey("tenant"))
				if err != nil {
					t.Fatalf("a hold call within the cap: %v", err)
				}
				holds = append(holds, id)
			}
			if _, err := tf.d.Submit(ctx, "hold", `{}`, dispatcher.WithKey("tenant")); err == nil {
				t.Fatalf("a hold call past the cap of %d was admitted", holdCap)
			} else if code, _ := refusedWith(err); code != windlass.CodeRateLimited {
				t.Fatalf("a hold call past the cap: %v, want rate_limited", err)
			}
			close(tf.release)
			for _, id := range holds {
				if r, err := tf.d.Wait(ctx, id); err != nil || r.Content != "released" {
					t.Fatalf("hold %s: %+v, %v", id, r, err)
				}
			}
			fleettest.WaitFor(t, 30*time.Second, "key tenant admitted again", func() bool {
				id, err := tf.d.Submit(ctx, "hold", `{}`, dispatcher.WithKey("tenant"))
				if err == nil {
					_, _ = tf.d.Wait(ctx, id)
				}
				return err == nil
			})
		})
	}
}

// refusedWith reports err's code and retry-after when it is a refusal by a
// limit.
func refusedWith(err error) (windlass.ErrorCode, time.Duration) {
	var ce *windlass.CallError
	if !errors.As(err, &ce) {
		return "", 0
	}
	return ce.Code, ce.RetryAfter()
}

// loadCall is one call of the failover test's load.
type loadCall struct {
	id         string
	start, end time.Time
	err        error
}

// TestSentinelFailoverUnderLoad fails the Redis master of a Sentinel set
// over while calls flow and gated calls are submitted: killed (SIGKILL,
// the Sentinels promote the replica once they agree it is down), and in a
// planned switch (SENTINEL FAILOVER). Every call is answered, none runs
// twice; the gated calls held before the failover are still held after it,
// and each runs once when approved. It logs what the failover window cost:
// how long the switch took, how many calls took longer than before and by
// how much; and every gated call submitted around it is held, though Redis
// replicates asynchronously, because the approval service waits for the
// replica to have a hold (Config.ReplicaAcks) before it takes the call.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	t.Run("killed", func(t *testing.T) {
		failoverUnderLoad(t, func(ctx context.Context, s *testserver.RedisSentinel) error {
			old, err := s.Master(ctx)
			if err != nil {
				return err
			}
			old.Kill()
			if _, err = s.WaitNewMaster(ctx, old.Addr()); err != nil {
				return err
			}
			// Brought back, as an operator would: Sentinel makes it the
			// new master's replica. Until a replica has them, the approval
			// service (ReplicaAcks 1) holds no call and releases none.
			old.Restart(t)
			return nil
		})
	})
	t.Run("planned", func(t *testing.T) {
		failoverUnderLoad(t, func(ctx context.Context, s *testserver.RedisSentinel) error {
			_, err := s.Failover(ctx)
			return err
		})
	})
}

// failoverUnderLoad is TestSentinelFailoverUnderLoad with one way to fail
// the master over: failover returns once a new master is in place.
func failoverUnderLoad(t *testing.T, failover func(context.Context, *testserver.RedisSentinel) error) {
	// The registry's default lease, as deployed: the integration tests' 2s
	// lease is shorter than a failover, so it would lapse and the tools
	// would have no live worker until the next heartbeat on the new master.
	tf := newTopologyFleet(t, fleettest.WithRedisSentinel(), fleettest.WithRegistryTTL(registry.DefaultTTL))
	s := tf.RedisSentinel
	ctx := t.Context()

	const preHeld = 10
	var before []*approval.HeldCall
	for i := range preHeld {
		id, err := tf.d.Submit(ctx, "transfer_funds", map[string]any{"to": fmt.Sprint("before-", i), "amount": 1})
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, tf.held(t, id, 30*time.Second))
	}

	// The load: closed loops of add, and a gated call every 50ms.
	const loops = 8
	stop := make(chan struct{})
	var wg sync.WaitGroup
	calls := make([][]loadCall, loops)
	var answered atomic.Int64 // calls returned, answered or not
	for g := range loops {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c := loadCall{id: fmt.Sprintf("load-%d-%d", g, n), start: time.Now()}
				cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				r, err := tf.d.Call(cctx, "add", map[string]any{"a": n, "b": 1}, dispatcher.WithCallID(c.id))
				cancel()
				c.end = time.Now()
				if err == nil && (r.IsError || r.Content != fmt.Sprint(n+1)) {
					err = fmt.Errorf("answer %+v, want %d", r, n+1)
				}
				c.err = err
				calls[g] = append(calls[g], c)
				answered.Add(1)
			}
		})
	}
	var gatedMu sync.Mutex
	var gated []loadCall
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			c := loadCall{start: time.Now()}
			c.id, c.err = tf.d.Submit(ctx, "transfer_funds", map[string]any{"to": fmt.Sprint("during-", n), "amount": 1})
			c.end = time.Now()
			gatedMu.Lock()
			gated = append(gated, c)
			gatedMu.Unlock()
		}
	})

	// The kill comes once the load is warm (a baseline of answered calls),
	// and the load runs on until as many calls again were answered after
	// the promotion.
	const warm = 200
	fleettest.WaitFor(t, 2*time.Minute, "the load's first calls answered", func() bool { return answered.Load() >= warm })
	steady := time.Now() // the baseline: calls from here to the failover
	fleettest.WaitFor(t, 2*time.Minute, "a baseline of calls answered", func() bool { return answered.Load() >= 2*warm })
	began := time.Now() // the failover's start
	if err := failover(ctx, s); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	after := answered.Load()
	fleettest.WaitFor(t, 2*time.Minute, "calls answered after the promotion", func() bool { return answered.Load() >= after+warm })
	close(stop)
	wg.Wait()

	// Every call answered, and run once.
	var all []loadCall
	for _, cs := range calls {
		all = append(all, cs...)
	}
	failed := 0
	var firstFail, lastFail time.Duration
	for _, c := range all {
		if c.err != nil {
			at := c.start.Sub(began)
			if failed == 0 || at < firstFail {
				firstFail = at
			}
			lastFail = max(lastFail, at)
			failed++
			if failed <= 5 {
				t.Errorf("%s (started %s after the failover began): %v", c.id, c.start.Sub(began).Round(time.Millisecond), c.err)
			}
		} else if n := tf.runCount(c.id); n != 1 {
			t.Errorf("%s ran %d times, want 1", c.id, n)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d calls were not answered, started from %s to %s after the failover began", failed, len(all), firstFail.Round(time.Millisecond), lastFail.Round(time.Millisecond))
	}

	// What the window cost.
	var base, window []time.Duration
	for _, c := range all {
		switch {
		case c.end.Before(began):
			if c.start.After(steady) {
				base = append(base, c.end.Sub(c.start))
			}
		case c.start.Before(promoted):
			window = append(window, c.end.Sub(c.start))
		}
	}
	slices.Sort(base)
	slices.Sort(window)
	var baseP99 time.Duration
	if len(base) > 0 {
		baseP99 = base[len(base)*99/100]
	}
	slower := 0
	for _, d := range window {
		if d > baseP99 {
			slower++
		}
	}
	var windowMax time.Duration
	if len(window) > 0 {
		windowMax = window[len(window)-1]
	}
	t.Logf("failover started; Sentinel promoted the replica %s later. %d calls in all, %d unanswered; before the failover p99 %s over %d calls; "+
		"of the %d calls in flight or started between its start and the promotion, %d took longer than that p99, the longest %s",
		promoted.Sub(began).Round(time.Millisecond), len(all), failed, baseP99.Round(time.Microsecond), len(base),
		len(window), slower, windowMax.Round(time.Millisecond))

	// The gated calls held before the failover are kept and run once.
	for _, h := range before {
		got, err := tf.svc.Get(ctx, h.ID)
		if err != nil || got.Status != approval.StatusPending {
			t.Errorf("gated call %s held before the failover: %+v, %v after it; want pending", h.ID, got, err)
			continue
		}
		tf.approveAndWait(t, got)
		if n := tf.runCount(h.ID); n != 1 {
			t.Errorf("gated call %s ran %d times, want 1", h.ID, n)
		}
	}
	// Those submitted around it: each is held (a hold the old master took
	// after the replica left it never reached the replica: WAIT says so, and
	// the call is held again on the new master), whenever it was submitted.
	lost, refused := 0, 0
	deadline := time.Now().Add(time.Minute) // for all of them: a lost call costs no more
	for _, c := range gated {
		if c.err != nil {
			refused++
			t.Logf("gated submit at %s after the failover began refused: %v", c.start.Sub(began).Round(time.Millisecond), c.err)
			continue
		}
		var h *approval.HeldCall
		var err error
		for {
			if h, err = tf.svc.Get(ctx, c.id); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(fleettest.PollInterval)
		}
		if err != nil {
			lost++
			t.Logf("gated call %s submitted %s after the failover began was never held: %v", c.id, c.start.Sub(began).Round(time.Millisecond), err)
			continue
		}
		if h.Status == approval.StatusPending {
			tf.approveAndWait(t, h)
		}
		if n := tf.runCount(c.id); n != 1 {
			t.Errorf("gated call %s submitted during the load ran %d times, want 1", c.id, n)
		}
	}
	t.Logf("gated calls submitted during the load: %d, %d refused at submit, %d never held", len(gated), refused, lost)
	if lost > 0 {
		t.Errorf("%d gated calls submitted during the failover were lost (never held); want 0", lost)
	}
}
