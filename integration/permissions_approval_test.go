package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// TestApprovalServiceRunsAsItsRole runs the approval service as the
// approval user of deploy/nats/accounts.conf, as deployed: it starts with
// no permissions violation (its consumers, its cancellations follower, its
// status subjects), and answers a dispatcher's request for the summary of
// held calls (windlass status) and for a held call's status.
func TestApprovalServiceRunsAsItsRole(t *testing.T) {
	ps := startPermServer(t)
	errs := make(chan error, 16)
	nc := ps.connect(t, "approval", errs)
	reg, err := registry.New(registry.Config{Client: testserver.StartRedis(t).Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	priv, _, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := release.ParsePrivateKey(priv)
	svc, err := approval.New(approval.Config{Conn: nc, Redis: testserver.StartRedis(t).Client(t), Registry: reg, Signer: release.NewSigner(key)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("approval service: Run = %v", err)
		}
	})

	// A dispatcher asks: the summary (retried until the service is up),
	// then one call's status.
	dnc := ps.connect(t, "dispatcher-a", errs)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dnc.Request(layout.ApprovalSummarySubject, []byte(`{}`), time.Second)
		if err == nil {
			break
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("the approval service stopped: %v", err)
		default:
		}
		if errors.Is(err, nats.ErrPermissionViolation) || time.Now().After(deadline) {
			t.Fatalf("a dispatcher's request for the approvals summary: %v", err)
		}
	}
	if _, err := dnc.Request(layout.ApprovalStatusSubject, []byte(`{"id":"nope"}`), 5*time.Second); err != nil {
		t.Errorf("a dispatcher's request for a held call's status: %v", err)
	}
	for _, nc := range []*nats.Conn{nc, dnc} {
		if v := violations(t, nc, errs); len(v) > 0 {
			t.Errorf("permissions violations: %v", v)
		}
	}
}
