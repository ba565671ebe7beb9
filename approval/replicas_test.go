package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// receiver is a dashboard's webhook endpoint: it verifies every request's
// signature and counts, per webhook-id, the deliveries it answered 2xx.
// A request that block matches is reported on inFlight (with the replica
// that sent it), then waits: until release is closed (then it is answered
// as any other), or until its client gives up or the test ends (503).
type receiver struct {
	t        *testing.T
	srv      *httptest.Server
	secret   webhook.Secret
	block    func(typ string) bool // nil: answer every request
	inFlight chan string           // the X-Replica of a blocked request
	release  chan struct{}         // closed: blocked requests go on
	done     chan struct{}

	mu        sync.Mutex
	delivered map[string]int    // webhook-id -> 2xx answers
	types     map[string]string // webhook-id -> event type
}

func newReceiver(t *testing.T, block func(typ string) bool) *receiver {
	r := &receiver{t: t, secret: webhook.NewSecret(), block: block, inFlight: make(chan string, 100), release: make(chan struct{}), done: make(chan struct{}),
		delivered: map[string]int{}, types: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() { close(r.done); r.srv.Close() })
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := webhook.Verify([]webhook.Secret{r.secret}, req.Header, body, 0); err != nil {
		r.t.Errorf("webhook signature: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	if r.block != nil && r.block(p.Type) {
		r.inFlight <- req.Header.Get("X-Replica")
		select {
		case <-r.release:
		case <-req.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case <-r.done:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	}
	id := req.Header.Get(webhook.HeaderID)
	r.mu.Lock()
	r.delivered[id]++
	r.types[id] = p.Type
	r.mu.Unlock()
}

// blockFirst is a receiver's block that holds the first request of type
// typ, and no other.
func blockFirst(typ string) func(string) bool {
	var once sync.Once
	return func(t string) bool {
		first := false
		if t == typ {
			once.Do(func() { first = true })
		}
		return first
	}
}

// counts returns a copy of the deliveries per webhook-id.
func (r *receiver) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.delivered))
	for id, n := range r.delivered {
		out[id] = n
	}
	return out
}

// tagReplica marks every request of one replica's sender with X-Replica.
type tagReplica struct {
	name string
	rt   http.RoundTripper
}

func (t tagReplica) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Replica", t.name)
	return t.rt.RoundTrip(req)
}

// replica is one approval service replica with clients of its own, so
// that killing it (closing them) leaves the others running.
type replica struct {
	name string
	svc  *approval.Service
	rc   *redis.Client
	kill func()
}

// startReplicas stops the fleet's own service and starts n replicas of the
// approval service on the fleet's NATS and Redis, each with its own
// clients and webhook sender posting to the receivers' endpoints.
func (f *fleet) startReplicas(n int, receivers ...*receiver) []*replica {
	f.t.Helper()
	f.stopSvc()
	out := make([]*replica, n)
	for i := range out {
		name := fmt.Sprintf("r%d", i)
		transport := http.DefaultTransport.(*http.Transport).Clone()
		var eps []webhook.Endpoint
		for _, rcv := range receivers {
			eps = append(eps, webhook.Endpoint{URL: rcv.srv.URL + "/hook", Secrets: []webhook.Secret{rcv.secret}})
		}
		cfg := f.cfg
		cfg.Conn, cfg.Redis = f.Conn(), f.Redis.Client(f.t)
		rc := cfg.Redis.(*redis.Client)
		cfg.Notify, cfg.Replica, cfg.ClaimAfter = nil, name, time.Second
		if len(eps) > 0 {
			sender, err := webhook.New(webhook.Config{Endpoints: eps, Client: &http.Client{Transport: tagReplica{name: name, rt: transport}},
				InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, Timeout: time.Minute})
			if err != nil {
				f.t.Fatal(err)
			}
			cfg.Webhooks = sender
		}
		svc, err := approval.New(cfg)
		if err != nil {
			f.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = svc.Run(ctx) }()
		var once sync.Once
		kill := func() {
			once.Do(func() {
				cancel()
				_ = rc.Close()
				cfg.Conn.Close()
				<-done
				transport.CloseIdleConnections()
			})
		}
		f.t.Cleanup(kill)
		out[i] = &replica{name: name, svc: svc, rc: rc, kill: kill}
	}
	return out
}

// auditDrained reports whether every consumer group on the audit stream
// has read every entry and has none pending.
func auditDrained(ctx context.Context, rc redis.UniversalClient) bool {
	groups, err := rc.XInfoGroups(ctx, approval.DefaultPrefix+"{index}:audit").Result()
	if err != nil || len(groups) == 0 {
		return false
	}
	for _, g := range groups {
		if g.Pending != 0 || g.Lag != 0 {
			return false
		}
	}
	return true
}

// decideAll holds calls, approves the first half and rejects the rest,
// through the given replicas in turn; it returns the calls' ids.
func (f *fleet) decideAll(replicas []*replica, n int) []string {
	f.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.submit(payArgs{To: fmt.Sprintf("p%d", i), Amount: 1})
	}
	for i, id := range ids {
		svc := replicas[i%len(replicas)].svc
		var h *approval.HeldCall
		fleettest.WaitFor(f.t, 10*time.Second, "call "+id+" held", func() bool {
			var err error
			h, err = svc.Get(f.t.Context(), id)
			return err == nil
		})
		var err error
		if i < n/2 {
			_, err = svc.Approve(f.t.Context(), id, "alice", h.ArgsHash, nil)
		} else {
			_, err = svc.Reject(f.t.Context(), id, "bob", "no")
		}
		if err != nil {
			f.t.Fatalf("deciding %s: %v", id, err)
		}
	}
	return ids
}

// TestReplicasDeliverEachWebhookOnce: two and three approval replicas on
// one Redis and one NATS deliver each webhook event once while all live
// (6 calls: 6 approval.requested, 3 approval.approved, 3
// approval.rejected). (Every replica used to read the notification group
// as the same consumer, so each re-read the others' pending entries: 6
// calls' events were delivered about twice.)
func TestReplicasDeliverEachWebhookOnce(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, nil)
			rcv := newReceiver(t, nil)
			replicas := f.startReplicas(n, rcv)
			f.decideAll(replicas, 6)
			const events = 12
			fleettest.WaitFor(t, 20*time.Second, "every event delivered and acknowledged", func() bool {
				return len(rcv.counts()) >= events && auditDrained(t.Context(), f.cfg.Redis)
			})
			counts, total := rcv.counts(), 0
			for id, c := range counts {
				total += c
				if c != 1 {
					t.Errorf("webhook %s (%s) delivered %d times", id, rcv.types[id], c)
				}
			}
			if len(counts) != events || total != events {
				t.Errorf("%d events, %d deliveries; want %d and %d", len(counts), total, events, events)
			}
		})
	}
}

// TestReplicaKilledMidDeliveryLosesNoWebhook: of three replicas, the one
// delivering the first approval.requested is killed (its context canceled,
// its Redis and NATS clients closed) while the receiver holds that request;
// the others deliver every event, the interrupted one included, and each
// other event once.
func TestReplicaKilledMidDeliveryLosesNoWebhook(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	rcv := newReceiver(t, blockFirst("approval.requested"))
	replicas := f.startReplicas(3, rcv)
	first := f.submit(payArgs{To: "first", Amount: 1})
	var victim string
	select {
	case victim = <-rcv.inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery of the first approval.requested")
	}
	var live []*replica
	for _, r := range replicas {
		if r.name == victim {
			r.kill()
		} else {
			live = append(live, r)
		}
	}
	if len(live) != 2 {
		t.Fatalf("the blocked request came from %q, not one of the replicas", victim)
	}
	if _, err := live[0].svc.Reject(t.Context(), first, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	f.decideAll(live, 6)
	const events = 14 // the first call's two and six calls' two each
	fleettest.WaitFor(t, 30*time.Second, "every event delivered and acknowledged", func() bool {
		return len(rcv.counts()) >= events && auditDrained(t.Context(), live[0].rc)
	})
	counts := rcv.counts()
	if len(counts) != events {
		t.Errorf("%d events delivered, want %d: %v", len(counts), events, counts)
	}
	for id, c := range counts {
		if c != 1 {
			t.Errorf("webhook %s (%s) delivered %d times, want once (the interrupted delivery never completed)", id, rcv.types[id], c)
		}
	}
}

// TestSlowEndpointHoldsBackNoOther: one endpoint that never answers does
// not delay another endpoint's events: each has its own queue. (Every
// event used to wait until every endpoint had it.)
func TestSlowEndpointHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	slow := newReceiver(t, func(string) bool { return true })
	fast := newReceiver(t, nil)
	f.startReplicas(1, slow, fast)
	for i := range 3 {
		f.submit(payArgs{To: fmt.Sprintf("p%d", i), Amount: 1})
	}
	fleettest.WaitFor(t, 10*time.Second, "the fast endpoint gets all three approval.requested", func() bool {
		return len(fast.counts()) == 3
	})
}

// TestDecisionRateIsSharedByReplicas: a reviewer's decisions are limited
// across the replicas together (5 a second, bursts of 20), not per
// replica.
func TestDecisionRateIsSharedByReplicas(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	replicas := f.startReplicas(2)
	apis := make([]*httptest.Server, len(replicas))
	for i, r := range replicas {
		apis[i] = httptest.NewServer(r.svc.Handler())
		defer apis[i].Close()
	}
	start := time.Now()
	allowed, limited := 0, 0
	for i := range 40 {
		req, _ := http.NewRequest("POST", apis[i%2].URL+"/v1/approvals/none/reject", strings.NewReader(`{"reason":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+f.tokens["carol"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited++
		} else {
			allowed++
		}
	}
	// The burst, and what the rate refilled while the requests were made.
	most := 20 + int(5*time.Since(start).Seconds()) + 1
	if allowed > most || limited == 0 {
		t.Errorf("%d decisions allowed, %d refused over two replicas; want at most %d allowed", allowed, limited, most)
	}
}

// TestRetentionRemovesDecidedCalls: with a retention of a second, a
// decided call, its place in the status list and the audit entries go once
// they are older than that; a pending call stays. (Calls, status sets and
// the audit stream used to grow for ever.)
func TestRetentionRemovesDecidedCalls(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	f.cfg.Retention = time.Second
	f.startService()
	rejected := f.submit(payArgs{To: "a", Amount: 1})
	f.held(rejected)
	if code, body := f.do("POST", "/v1/approvals/"+rejected+"/reject", "bob", map[string]any{"reason": "no"}); code != http.StatusOK {
		t.Fatalf("reject: %d %v", code, body)
	}
	pending := f.submit(payArgs{To: "b", Amount: 1})
	f.held(pending)
	fleettest.WaitFor(t, 10*time.Second, "the rejected call, its listing and its audit entries gone", func() bool {
		_, err := f.svc.Get(t.Context(), rejected)
		listed, _, _ := f.svc.List(t.Context(), approval.Filter{Status: approval.StatusRejected})
		audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{})
		for _, ev := range audit {
			if ev.CallID == rejected {
				return false
			}
		}
		return errors.Is(err, approval.ErrNotFound) && len(listed) == 0
	})
	if h, err := f.svc.Get(t.Context(), pending); err != nil || h.Status != approval.StatusPending {
		t.Errorf("the pending call: %+v, %v; want it kept, pending", h, err)
	}
	n, err := f.cfg.Redis.XLen(t.Context(), approval.DefaultPrefix+"{index}:audit").Result()
	if err != nil || n > 1 {
		t.Errorf("audit stream length %d (%v), want at most the pending call's entry", n, err)
	}
}

// TestSlowDeliveryIsNotTakenOver: a live replica whose delivery takes
// three times ClaimAfter keeps its event (it renews its claim), so no other
// replica delivers it too; once the receiver answers, every event has been
// delivered once.
func TestSlowDeliveryIsNotTakenOver(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	rcv := newReceiver(t, blockFirst("approval.requested"))
	replicas := f.startReplicas(2, rcv)
	f.submit(payArgs{To: "slow", Amount: 1})
	var holder string
	select {
	case holder = <-rcv.inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery of the first event")
	}
	// For three claim timeouts, the entry stays with the replica
	// delivering it.
	key, rc := approval.DefaultPrefix+"{index}:audit", replicas[0].rc
	until := time.Now().Add(3 * time.Second)
	for time.Now().Before(until) {
		groups, err := rc.XInfoGroups(t.Context(), key).Result()
		if err != nil || len(groups) != 1 {
			t.Fatalf("groups %v, %v", groups, err)
		}
		pending, err := rc.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: key, Group: groups[0].Name, Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(pending) != 1 || pending[0].Consumer != holder {
			t.Fatalf("pending %+v (%v), want the one entry with %s, which is delivering it", pending, err, holder)
		}
		time.Sleep(100 * time.Millisecond) // polling an invariant over a span, not waiting for an event
	}
	close(rcv.release)
	f.decideAll(replicas, 2)
	const events = 5 // the slow call's requested, two calls' two each
	fleettest.WaitFor(t, 20*time.Second, "every event delivered and acknowledged", func() bool {
		return len(rcv.counts()) >= events && auditDrained(t.Context(), rc)
	})
	for id, c := range rcv.counts() {
		if c != 1 {
			t.Errorf("webhook %s (%s) delivered %d times", id, rcv.types[id], c)
		}
	}
}
