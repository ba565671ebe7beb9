package approval_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lateGroups is a go-redis hook that holds back XGROUP CREATE until the
// audit stream has an entry, or for at most wait: it makes the service's
// notification group come as late as a slow Redis (a cluster client
// learning its slots) can make it, an ordering a real server shows only
// by chance. When the group is created after the entry, at the stream's
// end, the entry is never delivered.
type lateGroups struct {
	peek  *redis.Client // the same Redis, unhooked
	audit string
	wait  time.Duration
}

func (h lateGroups) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h lateGroups) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h lateGroups) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "xgroup" && len(args) > 1 && strings.EqualFold(args[1].(string), "create") {
			for deadline := time.Now().Add(h.wait); time.Now().Before(deadline); {
				if n, _ := h.peek.XLen(ctx, h.audit).Result(); n > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return next(ctx, cmd)
	}
}

// startWithLateGroups restarts the fleet's approval service on a fresh key
// prefix, its Redis client hooked by lateGroups; it returns the audit
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
	hooked.AddHook(lateGroups{peek: peek, audit: audit, wait: 2 * time.Second})
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
