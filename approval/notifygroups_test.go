package approval_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// holdBack is a go-redis hook that holds back the commands hold picks
// until ready says go, or for at most wait, checking every 5 ms: it makes
// the service's notification groups (or its reads) come as late as a slow
// Redis (a cluster client learning its slots, a replica in its backoff)
// can make them, an order a real server shows only by chance.
type holdBack struct {
	hold  func(redis.Cmder) bool
	ready func(context.Context) bool
	wait  time.Duration
}

func (h holdBack) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h holdBack) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h holdBack) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hold(cmd) {
			for deadline := time.Now().Add(h.wait); time.Now().Before(deadline) && ctx.Err() == nil && !h.ready(ctx); {
				time.Sleep(5 * time.Millisecond)
			}
		}
		return next(ctx, cmd)
	}
}

// groupsAfter holds back the creation of notification groups until the
// audit stream has more than n entries: a group created then starts
// behind them unless the service made its groups first.
func groupsAfter(peek *redis.Client, audit string, n int64, wait time.Duration) holdBack {
	return holdBack{hold: createsGroups, wait: wait, ready: func(ctx context.Context) bool {
		l, _ := peek.XLen(ctx, audit).Result()
		return l > n
	}}
}

// createsGroups reports that cmd creates notification groups: XGROUP
// CREATE, or a script given the record of the queues as a key.
func createsGroups(cmd redis.Cmder) bool {
	args := cmd.Args()
	switch cmd.Name() {
	case "xgroup":
		return len(args) > 1 && strings.EqualFold(fmt.Sprint(args[1]), "create")
	case "evalsha", "eval":
		for _, a := range args {
			if strings.HasSuffix(fmt.Sprint(a), "{index}:queues") {
				return true
			}
		}
	}
	return false
}

// startWithLateGroups restarts the fleet's approval service on a fresh key
// prefix, its Redis client hooked by groupsAfter; it returns the audit
// stream's key.
func startWithLateGroups(t *testing.T, f *fleet) string {
	t.Helper()
	f.stopSvc()
	addr := f.cfg.Redis.(*redis.Client).Options().Addr
	hooked := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = hooked.Close() })
	peek := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = peek.Close() })
	f.cfg.Prefix = "late-" + strings.ToLower(rand.Text()[:8]) + ":"
	audit := f.cfg.Prefix + "{index}:audit"
	// 2 s: long enough for the service to hold a call when it may take
	// calls in before its groups exist (the bug); the fixed service
	// creates them first, so it always waits this long, once, at start.
	hooked.AddHook(groupsAfter(peek, audit, 0, 2*time.Second))
	f.cfg.Redis = hooked
	f.startService()
	return audit
}

// requested waits for the approval.requested event of call id on f.events.
func requested(t *testing.T, f *fleet, id string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-f.events:
			if ev.Event == "requested" && ev.CallID == id {
				return
			}
		case <-timeout:
			t.Fatalf("no requested event for %s", id)
		}
	}
}

// TestACallTakenInAtStartIsNotified: a call that waits for the service
// (submitted while it starts) is held, and its requested event reaches the
// notification queue even when Redis creates the queue's group slowly.
// Before, the service took calls in before its groups existed: a group
// created after the call's event started behind it, and the webhook of the
// first calls after a deployment's first start was never sent.
func TestACallTakenInAtStartIsNotified(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	startWithLateGroups(t, f)
	requested(t, f, f.submit(payArgs{To: "early", Amount: 1}))
}

// TestEventsAfterRedisLostTheQueueAreNotified: when the audit stream and
// its groups are gone (Redis restarted empty; here the stream's key is
// deleted), the group is created again at the stream's beginning, so the
// events appended since the loss are delivered. Before, it was created at
// the stream's end: a call held before the loop noticed the loss was never
// notified.
func TestEventsAfterRedisLostTheQueueAreNotified(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	audit := startWithLateGroups(t, f)
	requested(t, f, f.submit(payArgs{To: "before", Amount: 1}))
	if err := f.cfg.Redis.Del(t.Context(), audit).Err(); err != nil {
		t.Fatal(err)
	}
	requested(t, f, f.submit(payArgs{To: "after", Amount: 2}))
}

// TestEventBeforeAnotherReplicaRecreatesTheGroupIsNotified: Redis loses
// the audit stream, its groups and the record of its queues (restarted
// empty; here their keys are deleted). Replica A, still running, takes a
// call in and appends its "requested" event before its own loop has seen
// NOGROUP; replica B starts now (a rollout, a crash-looping pod) and
// creates the missing group. The event is delivered: with no record of
// the queues, B creates the group at the stream's beginning. Before, B
// created it at the end, behind the event, and A's recovery then found
// the group there: neither replica ever delivered it.
func TestEventBeforeAnotherReplicaRecreatesTheGroupIsNotified(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	addr := f.cfg.Redis.(*redis.Client).Options().Addr
	peek := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = peek.Close() })
	f.cfg.Prefix = "rep-" + strings.ToLower(rand.Text()[:8]) + ":"
	audit := f.cfg.Prefix + "{index}:audit"

	// Replica A, its client hooked.
	hooked := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = hooked.Close() })
	lost := new(atomic.Bool)
	// Once the data is lost, A's reads and its recovery wait until a group
	// exists again (B's), as a replica sleeping in its read backoff (up to
	// 5 s after a Redis outage) would.
	hooked.AddHook(holdBack{
		hold: func(cmd redis.Cmder) bool {
			return lost.Load() && (cmd.Name() == "xreadgroup" || cmd.Name() == "xautoclaim" || createsGroups(cmd))
		},
		ready: func(ctx context.Context) bool {
			g, _ := peek.XInfoGroups(ctx, audit).Result()
			return len(g) > 0
		},
		wait: 15 * time.Second,
	})
	cfgB := f.cfg // replica B: same configuration, own client and name
	f.cfg.Redis, f.cfg.Replica = hooked, "replica-a"
	f.startService()
	requested(t, f, f.submit(payArgs{To: "before", Amount: 1})) // the queue works

	// Redis loses the stream and its group.
	lost.Store(true)
	if err := peek.Del(t.Context(), audit, f.cfg.Prefix+"{index}:queues").Err(); err != nil {
		t.Fatal(err)
	}
	id := f.submit(payArgs{To: "after", Amount: 2})
	deadline := time.Now().Add(10 * time.Second)
	for n := int64(0); n == 0; n, _ = peek.XLen(t.Context(), audit).Result() {
		if time.Now().After(deadline) {
			t.Fatal("the call's event was not appended")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Replica B starts.
	cfgB.Redis, cfgB.Replica = peek, "replica-b"
	svcB, err := approval.New(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svcB.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// Diagnostics: where B put the group, against the entries.
	fleettest.WaitFor(t, 20*time.Second, "a group on the audit stream again", func() bool {
		g, _ := peek.XInfoGroups(t.Context(), audit).Result()
		return len(g) > 0
	})
	g, _ := peek.XInfoGroups(t.Context(), audit).Result()
	entries, _ := peek.XRange(t.Context(), audit, "-", "+").Result()
	for _, e := range entries {
		t.Logf("audit entry %s %v", e.ID, e.Values["event"])
	}
	t.Logf("group %s created with last-delivered-id %s", g[0].Name, g[0].LastDeliveredID)

	requested(t, f, id)
}

// TestDecisionWhileGroupsAreCreatedIsNotified: the HTTP API serves while
// Run is still creating the notification groups (cmd/windlass starts
// svc.Run and the server side by side; so does startService here). A
// queue added in this start (Notify here, a webhook URL) has no group yet
// when a reviewer approves a call held from before. The approval reaches
// the queue: the decision waits for the groups. Before, its event was
// appended first and the group created behind it.
func TestDecisionWhileGroupsAreCreatedIsNotified(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	notify := f.cfg.Notify
	addr := f.cfg.Redis.(*redis.Client).Options().Addr
	peek := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = peek.Close() })
	prefix := "dec-" + strings.ToLower(rand.Text()[:8]) + ":"
	audit := prefix + "{index}:audit"
	// A deployment without the queue holds a call.
	f.restartWith(func(c *approval.Config) { c.Prefix, c.Notify = prefix, nil })
	id := f.submit(payArgs{To: "held", Amount: 3})
	f.held(id)
	n, _ := peek.XLen(t.Context(), audit).Result()
	// It restarts with the queue; its group is slow to come.
	hooked := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = hooked.Close() })
	// 2 s, as in startWithLateGroups: the decision waits this long, once.
	hooked.AddHook(groupsAfter(peek, audit, n, 2*time.Second))
	f.restartWith(func(c *approval.Config) { c.Notify, c.Redis = notify, hooked })
	f.approve(id) // served at once, as the API serves before Run is ready
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-f.events:
			t.Logf("event %s %s", ev.Event, ev.CallID)
			if ev.Event == "approved" && ev.CallID == id {
				return
			}
		case <-timeout:
			t.Fatalf("no approved event for %s: the decision made while the queue's group was being created was never notified", id)
		}
	}
}
