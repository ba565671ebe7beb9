package approval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

func TestWebhooksReachADashboardThatWasDown(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	var (
		up       atomic.Bool
		mu       sync.Mutex
		received []string           // event types, in order
		ids      = map[string]int{} // webhook-id -> deliveries
		refused  atomic.Int64
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !up.Load() {
			refused.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if err := webhook.Verify([]webhook.Secret{secret}, r.Header, body, 0); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var p struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		ids[r.Header.Get("webhook-id")]++
		if ids[r.Header.Get("webhook-id")] == 1 {
			received = append(received, p.Type)
		}
		mu.Unlock()
	}))
	defer receiver.Close()

	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {Window: 2 * time.Second}})
	var attempts atomic.Int64
	sender, err := webhook.New(webhook.Config{
		Endpoints:       []webhook.Endpoint{{URL: receiver.URL, Secrets: []webhook.Secret{secret}}},
		AllowPrivate:    true, // the receiver is on localhost
		InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, MaxElapsed: time.Minute,
		OnAttempt: func(a webhook.Attempt) {
			attempts.Add(1)
			_ = f.svc.RecordWebhookAttempt(context.Background(), a)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseIdleConnections()
	f.stopSvc()
	f.cfg.Webhooks = sender
	f.startService()

	approved := f.submit(payArgs{To: "a", Amount: 1})
	h := f.held(approved)
	f.do("POST", "/v1/approvals/"+approved+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	rejected := f.submit(payArgs{To: "b", Amount: 1})
	f.held(rejected)
	f.do("POST", "/v1/approvals/"+rejected+"/reject", "bob", map[string]any{"reason": "no"})
	expired := f.submit(payArgs{To: "c", Amount: 1})
	f.wait(expired) // expires after the 2 s window

	// The dashboard has been down all along; it comes back now.
	if refused.Load() == 0 {
		t.Fatal("the receiver was never tried while down")
	}
	up.Store(true)
	want := []string{"approval.requested", "approval.approved", "approval.requested", "approval.rejected", "approval.requested", "approval.expired"}
	fleettest.WaitFor(t, 20*time.Second, fmt.Sprintf("the webhooks %v", want), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) >= len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if received[i] != want[i] {
			t.Fatalf("received %v, want %v (every event, in order)", received, want)
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("webhook %s delivered %d times after it succeeded once", id, n)
		}
	}
	// Each attempt is logged once its answer (or failure) is in, a moment
	// after the receiver counted it.
	var logged int64
	fleettest.WaitFor(t, 5*time.Second, "every webhook attempt logged", func() bool {
		logged, err = f.cfg.Redis.XLen(t.Context(), approval.DefaultPrefix+"webhooks").Result()
		return err == nil && logged >= attempts.Load()
	})
	if err != nil || logged < attempts.Load() || logged <= int64(len(want)) {
		t.Errorf("webhook attempts logged = %d (%v), attempts made %d", logged, err, attempts.Load())
	}
}

// TestApprovedWebhookSaysReleased: the approval.approved webhook of a call
// approved by two reviewers comes once it was released, saying so
// ("released": true), with the reviewer whose approval decided it as the
// actor; the call's approval.requested is the only other event sent.
func TestApprovedWebhookSaysReleased(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	var (
		mu       sync.Mutex
		payloads = map[string][]map[string]any{} // type -> data
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]webhook.Secret{secret}, r.Header, body, 0); err != nil {
			t.Errorf("signature: %v", err)
		}
		var p struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		payloads[p.Type] = append(payloads[p.Type], p.Data)
		mu.Unlock()
	}))
	defer receiver.Close()
	sender, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{{URL: receiver.URL, Secrets: []webhook.Secret{secret}}}, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseIdleConnections()
	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {RequiredApprovals: 2}})
	f.stopSvc()
	f.cfg.Webhooks = sender
	f.startService()

	id := f.submit(payArgs{To: "a", Amount: 1})
	h := f.held(id)
	for _, reviewer := range []string{"alice", "bob"} {
		if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", reviewer, map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK {
			t.Fatalf("approve as %s: %d %v", reviewer, code, body)
		}
	}
	if r := f.wait(id); r.IsError {
		t.Fatalf("result %+v, want the payment", r)
	}
	// Wait for both: once in a loaded CI run the approved webhook was in
	// and the requested one not yet when the test looked (cause not
	// captured; the test asserts neither order nor timing of the two).
	fleettest.WaitFor(t, 10*time.Second, "the approval.requested and approval.approved webhooks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(payloads["approval.approved"]) > 0 && len(payloads["approval.requested"]) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	d := payloads["approval.approved"][0]
	call, _ := d["call"].(map[string]any)
	if d["call_id"] != id || d["actor"] != "bob" || call["released"] != true || call["status"] != "approved" {
		t.Errorf("approval.approved data = %v, want call %s, actor bob, released true", d, id)
	}
	if len(payloads) != 2 || len(payloads["approval.requested"]) != 1 || len(payloads["approval.approved"]) != 1 {
		t.Errorf("webhooks %v, want one approval.requested and one approval.approved", payloads)
	}
}
