package approval

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestHoldWaitsForReplicas: with ReplicaAcks, a hold is taken only once a
// replica has it — on a master with its replica (Sentinel) at once — and
// one that no replica acknowledged is an ErrNotReplicated, so the call's
// intake is left for redelivery rather than acknowledged on a write a
// failover could lose.
func TestHoldWaitsForReplicas(t *testing.T) {
	t.Parallel()
	hold := func(rc redis.UniversalClient, id string) error {
		st := &store{rc: rc, prefix: "t:", replicaAcks: 1}
		now := time.Now()
		_, err := st.hold(t.Context(), &HeldCall{ID: id, Tool: "pay", ArgsHash: "h", RequestedAt: now, ExpiresAt: now.Add(time.Hour),
			RequiredApprovals: 1, call: &windlass.ToolCall{ID: id, Name: "pay"}}, 1)
		return err
	}
	t.Run("NoReplica", func(t *testing.T) {
		t.Parallel()
		if err := hold(testserver.StartRedis(t).Client(t), "alone"); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("hold on a Redis with no replica = %v; want ErrNotReplicated", err)
		}
	})
	t.Run("WithAReplica", func(t *testing.T) {
		t.Parallel()
		s := testserver.StartRedisSentinel(t)
		if err := hold(s.Client(t), "replicated"); err != nil {
			t.Errorf("hold on a master with a replica = %v; want it taken", err)
		}
	})
}
