package approval

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestGroupsLostWithRedisAllStartAtTheBeginning: a deployment with two
// queues (Notify and a webhook) runs; Redis restarts empty; a call is held
// (its event appended) before the loops notice. Each queue's loop then
// sees NOGROUP and recreates its own group, in turn. Every group lost with
// the data starts at the stream's beginning, so each queue delivers the
// event. Before, the first recovery wrote the record of the queues, and
// the second group was taken for a new queue and started at the end.
func TestGroupsLostWithRedisAllStartAtTheBeginning(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	rc := r.Client(t)
	s := &Service{cfg: Config{Redis: rc}, store: &store{rc: rc, prefix: "t:"}}
	ctx := t.Context()
	groups := []string{"notify", "webhook:0123456789abcdef"}
	if err := s.createGroups(ctx, groups...); err != nil { // ensureGroups at start
		t.Fatal(err)
	}
	r.Restart(t) // no persistence: Redis comes back empty
	for deadline := time.Now().Add(10 * time.Second); rc.Ping(ctx).Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("redis did not come back")
		}
	}
	if n, _ := rc.Exists(ctx, s.store.auditKey(), s.store.queuesKey()).Result(); n != 0 {
		t.Fatalf("%d of the keys survived the restart", n)
	}
	ev, err := rc.XAdd(ctx, &redis.XAddArgs{Stream: s.store.auditKey(), Values: map[string]any{"event": "requested"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups { // each loop's NOGROUP recovery (notifyLoop)
		if err := s.recreateGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := rc.XInfoGroups(ctx, s.store.auditKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range infos {
		if g.LastDeliveredID != "0-0" {
			t.Errorf("group %q recreated after the loss at %s, behind event %s appended after the loss: that queue never delivers it", g.Name, g.LastDeliveredID, ev)
		}
	}
}
