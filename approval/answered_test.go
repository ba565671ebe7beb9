package approval_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// failOnceAfter is a go-redis hook: once a command that after matches has
// run, the next pipeline fails, once (a Redis blip: a timeout, a
// connection reset, a failover's switch).
type failOnceAfter struct {
	after func(redis.Cmder) bool
	armed atomic.Bool
	fired atomic.Bool
}

func (h *failOnceAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failOnceAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.after(cmd) {
			h.armed.Store(true)
		}
		return err
	}
}

func (h *failOnceAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && h.fired.CompareAndSwap(false, true) {
			err := errors.New("injected: connection reset by peer")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestARejectionIsAnsweredThroughARedisBlip: a reviewer rejects a
// held call; the reject script commits, then the service's next Redis read
// (store.get, to answer the caller) fails once. The reviewer is told 500,
// the call is rejected for good (a second rejection is 409), and its
// caller is answered rejected all the same, by the answer sweep. Before,
// nothing answered a rejected call again (the sweep finished only approved,
// unreleased ones): its caller waited until its deadline, to be told
// timeout. The same when the process died between the script and the
// answer. (Found by a review helper.)
func TestARejectionIsAnsweredThroughARedisBlip(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	addr := f.cfg.Redis.(*redis.Client).Options().Addr
	hooked := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = hooked.Close() })
	hook := &failOnceAfter{after: func(cmd redis.Cmder) bool {
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" {
			return false
		}
		res, _ := cmd.(*redis.Cmd).Slice()
		return len(res) == 1 && res[0] == "rejected"
	}}
	hooked.AddHook(hook)
	f.cfg.Redis = hooked
	f.startService()

	id := f.submit(payArgs{To: "mallory", Amount: 1e6})
	f.held(id)
	code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": "fraud"})
	t.Logf("reject = %d %v", code, body)
	if !hook.fired.Load() {
		t.Fatal("the blip was not injected")
	}
	h, err := f.svc.Get(t.Context(), id)
	if err != nil || h.Status != approval.StatusRejected {
		t.Fatalf("held call = %+v, %v; want rejected", h, err)
	}
	// The service is healthy again: a second rejection is refused, 409.
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "bob", map[string]any{"reason": "again"}); code != http.StatusConflict {
		t.Fatalf("second reject = %d %v", code, body)
	}
	// Two of the service's release/expiry sweeps (every 5 s) have time to
	// run; the caller should have its answer long before.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil || r.Code() != windlass.CodeRejected {
		t.Errorf("call %s is rejected in the service, but its caller got %v, %v (no answer): the rejection's answer was lost to one failed Redis read", id, r.Code(), err)
	}
}

// TestAnExpiryIsAnsweredThroughARedisBlip: the same for an expiry: the
// expire script commits, the read that answers the caller fails once
// (answerExpired skips the call), and the caller is told expired by the
// answer sweep. Before, it was never told. (Found by a review helper.)
func TestAnExpiryIsAnsweredThroughARedisBlip(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {Window: 500 * time.Millisecond}})
	f.stopSvc()
	addr := f.cfg.Redis.(*redis.Client).Options().Addr
	hooked := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = hooked.Close() })
	hook := &failOnceAfter{after: func(cmd redis.Cmder) bool {
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" || !strings.Contains(fmt.Sprint(cmd.Args()), "{index}:status:expired") {
			return false
		}
		n, _ := cmd.(*redis.Cmd).Int()
		return n == 1
	}}
	hooked.AddHook(hook)
	f.cfg.Redis = hooked
	f.startService()

	id := f.submit(payArgs{To: "bob", Amount: 1})
	f.held(id)
	fleettest.WaitFor(t, 10*time.Second, "call expired", func() bool {
		h, err := f.svc.Get(context.Background(), id)
		return err == nil && h.Status == approval.StatusExpired
	})
	// The blip fires on the service's next Redis read after the expire
	// script, which may come after this test has read the expired status.
	fleettest.WaitFor(t, 10*time.Second, "the blip injected after the expiry", hook.fired.Load)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil || r.Code() != windlass.CodeExpired {
		t.Errorf("call %s is expired in the service, but its caller got %v, %v (no answer)", id, r.Code(), err)
	}
}
