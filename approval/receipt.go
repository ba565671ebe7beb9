package approval

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/receiptread"
	"github.com/windlass-dev/windlass/receipt"
)

// The receipt of a released call: the worker's signed execution receipt,
// stored with the call's result (package receipt), checked here against
// the worker keys published in the registry. The audit log links to it:
// [Service.Audit] gives each released entry the field "receipt", the path
// of this endpoint for the call.

// ReceiptLink is the API path of a held call's receipt, the "receipt"
// field of its released audit entry.
func ReceiptLink(callID string) string {
	return "/v1/approvals/" + url.PathEscape(callID) + "/receipt"
}

// linkReceipts adds the receipt link to the released entries of events.
func linkReceipts(events []AuditEvent) []AuditEvent {
	for i, ev := range events {
		if ev.Event != "released" {
			continue
		}
		fields := make(map[string]string, len(ev.Fields)+1)
		for k, v := range ev.Fields {
			fields[k] = v
		}
		fields["receipt"] = ReceiptLink(ev.CallID)
		events[i].Fields = fields
	}
	return events
}

// handleReceipt answers GET /v1/approvals/{id}/receipt: the receipt of a
// call the service held, read from the call's stored result and checked.
// The answer is a receiptread.Report (PROTOCOL.md, "Execution receipts").
// 404 "not_found" for a call the service never held, 404 "no_result" while
// the call has no result (not released, or not finished yet), 200 with
// Verified false for a receipt that fails, or a result without one.
func (s *Service) handleReceipt(w http.ResponseWriter, r *http.Request, reviewer string) {
	h, err := s.GetAs(r.Context(), r.PathValue("id"), reviewer) // a reviewer outside its groups: 403
	if err != nil {
		s.writeDecisionError(w, err)
		return
	}
	results, err := s.js.Stream(r.Context(), layout.ResultsStream)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the results stream cannot be read: "+err.Error())
		return
	}
	c, err := receiptread.Check(r.Context(), s.cfg.Conn, results, s.cfg.Registry, h.ID)
	switch {
	case errors.Is(err, receiptread.ErrNoResult):
		writeError(w, http.StatusNotFound, "no_result", "the call has no result yet (or no more: past the results stream's max age), so no receipt")
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if c.Err == nil {
		c.Err = ranAsApproved(c.Receipt, h)
	}
	writeJSON(w, http.StatusOK, c.Report(h.ID)) // receiptread.Report
}

// ranAsApproved checks that a verified receipt is of the run h's
// reviewers approved: under a release, of h's tool, with the arguments
// they approved (h.ArgsHash, what the release signs) and by its
// approvers. A genuine receipt of another run stored under h's id (a
// worker that signs every call, running a message that reused the id)
// proves nothing about the approval.
func ranAsApproved(r receipt.Receipt, h *HeldCall) error {
	var why string
	switch {
	case h.Status != StatusApproved:
		why = fmt.Sprintf("the call was %s, never approved, yet a receipt says it ran", h.Status)
	case r.ReleaseID == "":
		why = "the receipt names no release: the run was not the approved call's"
	case r.Tool != h.Tool:
		why = fmt.Sprintf("the receipt is of tool %q, the call of %q", r.Tool, h.Tool)
	case r.ArgsHash != h.ArgsHash:
		why = fmt.Sprintf("the receipt's arguments hash %s is not the approved arguments' %s", r.ArgsHash, h.ArgsHash)
	case !slices.Equal(slices.Sorted(slices.Values(r.ApprovedBy)), slices.Sorted(slices.Values(h.Approvers))):
		why = fmt.Sprintf("the receipt names approvers %v, the call was approved by %v", r.ApprovedBy, h.Approvers)
	default:
		return nil
	}
	return &receipt.CheckError{Check: receipt.CheckRelease, Detail: why}
}
