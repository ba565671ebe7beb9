package approval

import (
	"testing"

	"github.com/windlass-dev/windlass/receipt"
)

// TestReceiptMustBeOfTheApprovedRun: a receipt that verifies (a real
// worker signed it) is still refused by the approval service's check
// unless it is of the run the call's reviewers approved. Such a receipt
// cannot be made on a real fleet without forging a message under a held
// call's id, so the check is tested on the values it compares.
func TestReceiptMustBeOfTheApprovedRun(t *testing.T) {
	held := &HeldCall{ID: "c1", Tool: "pay", ArgsHash: "h-approved", Status: StatusApproved, Approvers: []string{"bob", "alice"}}
	good := receipt.Receipt{CallID: "c1", Tool: "pay", ArgsHash: "h-approved", ReleaseID: "r1", ApprovedBy: []string{"alice", "bob"}}
	if err := ranAsApproved(good, held); err != nil {
		t.Fatalf("the approved run's receipt: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(r *receipt.Receipt, h *HeldCall)
	}{
		{"no release", func(r *receipt.Receipt, _ *HeldCall) { r.ReleaseID = "" }},
		{"other arguments", func(r *receipt.Receipt, _ *HeldCall) { r.ArgsHash = "h-other" }},
		{"other tool", func(r *receipt.Receipt, _ *HeldCall) { r.Tool = "refund" }},
		{"other approvers", func(r *receipt.Receipt, _ *HeldCall) { r.ApprovedBy = []string{"mallory"} }},
		{"fewer approvers", func(r *receipt.Receipt, _ *HeldCall) { r.ApprovedBy = []string{"alice"} }},
		{"the call still pending", func(_ *receipt.Receipt, h *HeldCall) { h.Status = StatusPending }},
		{"the call rejected", func(_ *receipt.Receipt, h *HeldCall) { h.Status = StatusRejected }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, h := good, *held
			r.ApprovedBy = append([]string(nil), good.ApprovedBy...)
			tc.edit(&r, &h)
			if err := ranAsApproved(r, &h); receipt.CheckOf(err) != receipt.CheckRelease {
				t.Errorf("ranAsApproved = %v; want the release check failed", err)
			}
		})
	}
}
