package approval_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestAnApprovalNoReplicaHasIsNotReleased: with ReplicaAcks, an approved
// call is released only once a replica has its approval. While the
// replica does not follow (a planned switch has begun), the approval is
// recorded and answered, the call not released and not run; once the
// replica follows again, the release is retried and the call runs once.
// Before, the call was released at once: a failover to that replica would
// bring it back pending, to be rejected or expire, and the dashboard told
// so, after it ran. (Found by a review helper.)
func TestAnApprovalNoReplicaHasIsNotReleased(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	master, replica := testserver.StartRedis(t), testserver.StartRedis(t)
	rc := replica.Client(t)
	follow(t, rc, master.Addr())
	f.cfg.Redis, f.cfg.ReplicaAcks = master.Client(t), 1
	f.startService()

	id := f.submit(payArgs{To: "bob", Amount: 5})
	h := f.held(id)
	follow(t, rc, "") // the replica stops following; it keeps what it has
	mc := master.Client(t)
	fleettest.WaitFor(t, 10*time.Second, "the master without a replica", func() bool {
		info, _ := mc.Info(t.Context(), "replication").Result()
		return strings.Contains(info, "connected_slaves:0")
	})
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	if code != http.StatusOK || body["status"] != "approved" || body["released"] == true {
		t.Fatalf("approve with no replica following = %d %v; want approved, not released", code, body)
	}
	if n := f.runs.Load(); n != 0 {
		t.Fatalf("the call ran %d times on an approval no replica has", n)
	}

	follow(t, rc, master.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if r, err := f.d.Wait(ctx, id); err != nil || r.IsError {
		t.Fatalf("Wait = %+v, %v; want the call run once the replica has its approval", r, err)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the call ran %d times; want once", n)
	}
}

// follow makes the Redis of rc a replica of addr, in sync, or ("") of
// nobody that answers: it stops following and keeps what it has.
func follow(t *testing.T, rc *redis.Client, addr string) {
	t.Helper()
	host, port := "127.0.0.1", "1"
	if addr != "" {
		var err error
		if host, port, err = net.SplitHostPort(addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.Do(t.Context(), "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		fleettest.WaitFor(t, 10*time.Second, "the replica in sync", func() bool {
			info, _ := rc.Info(t.Context(), "replication").Result()
			return strings.Contains(info, "master_link_status:up")
		})
	}
}
