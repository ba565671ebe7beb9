package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// failHold fails, once armed, the first holdScript run of call id: the
// service's Redis lost between the body's write and the state's (or the
// process gone there).
type failHold struct {
	id     string
	armed  atomic.Bool
	failed atomic.Bool
}

// failingHolds restarts the fleet's approval service on a Redis client
// that fails, once armed, the first hold of call id after its body
// (failHold), and returns the hook.
func (f *fleet) failingHolds(id string) *failHold {
	f.t.Helper()
	f.stopSvc()
	hook := &failHold{id: id}
	rc := f.Redis.Client(f.t)
	rc.AddHook(hook)
	f.cfg.Redis = rc
	f.startService()
	return hook
}

func (h *failHold) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.isHold(cmd) && h.armed.CompareAndSwap(true, false) {
			err := errors.New("injected: connection reset before the hold's state was written")
			cmd.SetErr(err)
			h.failed.Store(true)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failHold) isHold(cmd redis.Cmder) bool {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	var id, hash bool
	for _, a := range cmd.Args() {
		s, _ := a.(string)
		id = id || s == h.id
		hash = hash || s == "args_hash"
	}
	return id && hash
}

// TestAHoldInterruptedAfterItsBodyIsNotPairedWithAnotherMessage: a gated
// call's body is written (first message wins), then its state fails to be
// written (a Redis blip, the process gone) and the message waits for its
// redelivery. A second message with the same id and other arguments
// (anyone who may publish calls may send one) comes first: it is not that
// call, and is terminated; the first message's redelivery holds the call,
// which is approved and runs with its arguments. Before, the second's body
// was not written (one was there) but its state was, with its own
// args_hash: the reviewers saw the first's arguments under the second's
// hash, the release carried them signed for the second's hash, the worker
// refused it, and the approved call never ran. (Found by a review
// helper.)
func TestAHoldInterruptedAfterItsBodyIsNotPairedWithAnotherMessage(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := "pay-" + windlass.NewCallID()
	hook := f.failingHolds(id)
	hook.armed.Store(true)

	got := make(chan windlass.ToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r, err := f.d.Call(ctx, "pay", payArgs{To: "bob", Amount: 5}, dispatcher.WithCallID(id))
		if err != nil {
			t.Logf("call: %v", err)
		}
		got <- r
	}()
	fleettest.WaitFor(t, 10*time.Second, "the first message's hold interrupted after its body", hook.failed.Load)

	other := windlass.ToolCall{ID: id, Name: "pay", Arguments: json.RawMessage(`{"to":"mallory","amount":1}`), Deadline: time.Now().Add(time.Hour)}
	data, _ := json.Marshal(other)
	if _, err := f.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: layout.ApprovalSubject("pay"), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{"second-" + windlass.NewCallID()}, layout.HeaderOrigin: []string{"someone"}}}); err != nil {
		t.Fatal(err)
	}
	var h *approval.HeldCall
	fleettest.WaitFor(t, 30*time.Second, "the call held (the first message redelivered after the ack wait)", func() bool {
		var err error
		h, err = f.svc.Get(context.Background(), id)
		return err == nil
	})
	want, _ := release.ArgumentsHash(h.Arguments)
	if h.ArgsHash != want {
		t.Errorf("held call %s shows arguments %s under args_hash %s; their hash is %s", id, h.Arguments, h.ArgsHash, want)
	}
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	t.Logf("approve = %d %v", code, body)
	select {
	case r := <-got:
		if r.Code() != "" || f.runs.Load() != 1 {
			t.Errorf("the approved call answered %v %.200q (runs %d); want it run once with the arguments approved", r.Code(), r.Content, f.runs.Load())
		}
	case <-time.After(45 * time.Second):
		t.Errorf("the approved call was never answered (runs %d)", f.runs.Load())
	}
}
