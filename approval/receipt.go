package approval

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"time"

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

// ReceiptCheck is the answer of GET /v1/approvals/{id}/receipt.
type ReceiptCheck struct {
	// CallID is the call.
	CallID string `json:"call_id"`
	// Verified is true when the receipt verified: signed by a published
	// key of the worker it names, unaltered, over the stored result.
	Verified bool `json:"verified"`
	// FailedCheck names the check that failed (see receipt.Check), and
	// Error says what was wrong, when Verified is false.
	FailedCheck string `json:"failed_check,omitempty"`
	Error       string `json:"error,omitempty"`
	// Receipt is the receipt as decoded.
	Receipt *ReceiptView `json:"receipt,omitempty"`
	// Encoded is the receipt's header form as stored (Windlass-Receipt):
	// what a third party verifies for itself.
	Encoded string `json:"encoded,omitempty"`
	// ResultSHA256 is the SHA-256 of the stored result's body, which the
	// receipt's result_hash must equal.
	ResultSHA256 string `json:"result_sha256"`
	// PublicKey is the worker key the receipt names, as published
	// ("ed25519:<base64>"), and KeyWorkers the workers that published it;
	// absent when it is not published.
	PublicKey  string   `json:"public_key,omitempty"`
	KeyWorkers []string `json:"key_workers,omitempty"`
}

// ReceiptView is a receipt in the API's JSON: its fields, the signature in
// base64.
type ReceiptView struct {
	CallID     string    `json:"call_id"`
	Tool       string    `json:"tool"`
	SpecHash   string    `json:"spec_hash"`
	ArgsHash   string    `json:"args_hash"`
	ReleaseID  string    `json:"release_id,omitempty"`
	ApprovedBy []string  `json:"approved_by,omitempty"`
	ResultHash string    `json:"result_hash"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Worker     string    `json:"worker"`
	KeyID      string    `json:"key_id"`
	Signature  string    `json:"signature"`
}

// handleReceipt answers GET /v1/approvals/{id}/receipt: the receipt of a
// call the service held, read from the call's stored result and checked.
// 404 "not_found" for a call the service never held, 404 "no_result" while
// the call has no result (not released, or not finished yet), 200 with
// Verified false for a receipt that fails, or a result without one.
func (s *Service) handleReceipt(w http.ResponseWriter, r *http.Request, _ string) {
	h, err := s.Get(r.Context(), r.PathValue("id"))
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
	out := ReceiptCheck{CallID: h.ID, Verified: c.Err == nil, Encoded: c.Header, ResultSHA256: c.ResultSHA256}
	if c.Err != nil {
		out.FailedCheck, out.Error = string(receipt.CheckOf(c.Err)), c.Err.Error()
	}
	if rc := c.Receipt; rc.KeyID != "" {
		out.Receipt = &ReceiptView{CallID: rc.CallID, Tool: rc.Tool, SpecHash: rc.SpecHash, ArgsHash: rc.ArgsHash, ReleaseID: rc.ReleaseID,
			ApprovedBy: rc.ApprovedBy, ResultHash: rc.ResultHash, StartedAt: rc.StartedAt, FinishedAt: rc.FinishedAt,
			Worker: rc.Worker, KeyID: rc.KeyID, Signature: base64.StdEncoding.EncodeToString(rc.Signature)}
	}
	if c.Key != nil {
		out.PublicKey, out.KeyWorkers = "ed25519:"+base64.StdEncoding.EncodeToString(c.Key.Key), c.Key.Workers
	}
	writeJSON(w, http.StatusOK, out)
}
