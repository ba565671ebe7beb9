package integration_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/receiptread"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// TestApprovalRoleReadsReceipts: the approval service, as the approval
// user of deploy/nats/accounts.conf, may read a call's stored result for
// its receipt (GET /v1/approvals/{id}/receipt): a direct get, then the
// leader's answer that there is none — no permissions violation.
func TestApprovalRoleReadsReceipts(t *testing.T) {
	ps := startPermServer(t)
	errs := make(chan error, 16)
	nc := ps.connect(t, "approval", errs)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	results, err := js.Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{Client: testserver.StartRedis(t).Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiptread.Check(t.Context(), nc, results, reg, "no-such-call"); !errors.Is(err, receiptread.ErrNoResult) {
		t.Fatalf("the approval role reading a result: %v, want ErrNoResult", err)
	}
	if v := violations(t, nc, errs); len(v) > 0 {
		t.Errorf("permissions violations: %v", v)
	}
}
