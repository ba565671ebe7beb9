package registry_test

import (
	"errors"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// TestApprovalConditionRoundTrips: a spec's approval condition is stored
// with it and read back, by Lookup and by a view, under the same hash; a
// spec with an invalid condition is refused, with its position.
func TestApprovalConditionRoundTrips(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, testserver.StartRedis(t), 0)
	refund := windlass.Spec{Name: "refund", Description: "Refund.", ApprovalCondition: `args.amount > 100.0`}
	advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: []windlass.Spec{refund}})
	info, err := reg.Lookup(t.Context(), "refund")
	if err != nil {
		t.Fatal(err)
	}
	if info.Spec.ApprovalCondition != refund.ApprovalCondition || info.Hash != refund.Hash() {
		t.Errorf("Lookup = %+v, want the condition back under hash %s", info, refund.Hash())
	}
	view := watch(t, reg)
	if v, _, ok := view.Tool("refund"); !ok || v.Spec.ApprovalCondition != refund.ApprovalCondition || v.Hash != refund.Hash() {
		t.Errorf("the view's refund = %+v (found %v)", v, ok)
	}

	bad := windlass.Spec{Name: "bad", ApprovalCondition: `args.amount >`}
	_, err = reg.Advertise(t.Context(), registry.Advertisement{WorkerID: "w2", Specs: []windlass.Spec{bad}})
	var ce *windlass.ConditionError
	if !errors.As(err, &ce) || ce.Line != 1 || ce.Column != 14 {
		t.Errorf("Advertise(an invalid condition) = %v, want a *ConditionError at 1:14", err)
	}
}
