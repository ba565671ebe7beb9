package approval_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestApprovalOnRedisCluster: the approval service with its state on a
// three-master Redis Cluster (the rest of the fleet on its own Redis) holds
// six calls, approves three (released: the tool runs each once) and
// rejects three, sends each webhook once, keeps the audit log, and the
// calls' bulk is spread over the masters. (Under the old layout the hold
// script failed with CROSSSLOT: a call's hash and the indexes were on
// different slots.)
func TestApprovalOnRedisCluster(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	rcv := newReceiver(t, nil)
	sender, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{{URL: rcv.srv.URL, Secrets: []webhook.Secret{rcv.secret}}}, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseIdleConnections()
	cc := testserver.StartRedisCluster(t, 3).Client(t)
	f.cfg.Redis, f.cfg.Webhooks, f.cfg.Prefix = cc, sender, "cluster-"+strings.ToLower(rand.Text()[:8])+":"
	f.startService()

	var ids []string
	for i := range 6 {
		id := f.submit(payArgs{To: "bob", Amount: float64(i + 1)})
		ids = append(ids, id)
		h := f.held(id)
		if i%2 == 0 {
			if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK {
				t.Fatalf("approve: %d %v", code, body)
			}
			if r := f.wait(id); r.IsError {
				t.Fatalf("the approved call's result: %+v", r)
			}
		} else if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "bob", map[string]any{"reason": "no"}); code != http.StatusOK {
			t.Fatalf("reject: %d %v", code, body)
		}
	}
	if n := f.runs.Load(); n != 3 {
		t.Errorf("the tool ran %d times, want 3", n)
	}
	const events = 12
	fleettest.WaitFor(t, 20*time.Second, "every webhook", func() bool { return len(rcv.counts()) >= events })
	for id, c := range rcv.counts() {
		if c != 1 {
			t.Errorf("webhook %s delivered %d times", id, c)
		}
	}
	audit, err := f.svc.Audit(t.Context(), approval.AuditFilter{})
	if err != nil || len(audit) != 15 { // 6 requested, 3 approved, 3 released, 3 rejected
		b, _ := json.Marshal(audit)
		t.Errorf("audit: %v, %s", err, b)
	}
	// The calls' bulk is spread over the masters.
	var mu sync.Mutex
	masters := map[string]bool{}
	for _, id := range ids {
		slot := f.cfg.Prefix + "call:{" + id + "}"
		if err := cc.ForEachMaster(t.Context(), func(ctx context.Context, c *redis.Client) error {
			if n, _ := c.Exists(ctx, slot).Result(); n == 1 {
				mu.Lock()
				masters[c.Options().Addr] = true
				mu.Unlock()
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(masters) < 2 {
		t.Errorf("the bulk of 6 calls is on %d masters, want it spread", len(masters))
	}
}
