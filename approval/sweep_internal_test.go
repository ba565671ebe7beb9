package approval

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// commandCounter counts the commands a client sends, pipelined ones each.
// commandCounter counts the commands a client sends, less those go-redis
// sends itself to set up a new connection (HELLO, CLIENT SETINFO): how
// many the pool opens is not the code's doing.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.count(cmd); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c *commandCounter) count(cmd redis.Cmder) {
	if name := cmd.Name(); name != "hello" && name != "client" {
		c.n.Add(1)
	}
}

// holdApproved holds a call and approves it.
func holdApproved(t *testing.T, st *store, id string, now time.Time) {
	t.Helper()
	h := &HeldCall{ID: id, Tool: "pay", ArgsHash: "h", RequestedAt: now, ExpiresAt: now.Add(time.Hour), RequiredApprovals: 1,
		call: &windlass.ToolCall{ID: id, Name: "pay"}}
	if _, err := st.hold(t.Context(), h, 1); err != nil {
		t.Fatal(err)
	}
	if v, err := st.decide(t.Context(), id, decision{approve: true, reviewer: "alice", seenHash: "h"}, now); err != nil || v[0] != "approved" {
		t.Fatalf("approve %s: %v %v", id, v, err)
	}
}

// TestReleaseSweepReadsAnIndexNotTheHistory: with 300 approved calls
// released long ago, a release sweep that finds nothing to do sends one
// command; a call approved and not released is found. (The sweep used to
// page through every approved call ever, one HGETALL each, every 5 s on
// every replica.)
func TestReleaseSweepReadsAnIndexNotTheHistory(t *testing.T) {
	t.Parallel()
	rc := testserver.StartRedis(t).Client(t)
	st := &store{rc: rc, prefix: "t:"}
	now := time.Now()
	for i := range 300 {
		id := fmt.Sprintf("old-%d", i)
		holdApproved(t, st, id, now)
		if err := st.markReleased(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	s := &Service{store: st, cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	var count commandCounter
	rc.AddHook(&count)
	if err := s.resumeReleases(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := count.n.Load(); n > 1 {
		t.Errorf("a sweep with nothing to release sent %d commands, want 1", n)
	}
	holdApproved(t, st, "waiting", now)
	got, err := st.unreleased(t.Context(), resumeBatch)
	if err != nil || len(got) != 1 || got[0].ID != "waiting" {
		t.Errorf("unreleased = %v, %v; want the call waiting", got, err)
	}
}
