// Package receiptread reads a call's stored result and checks the
// execution receipt it carries (package receipt), the one way the approval
// service's receipt endpoint and `windlass receipt verify` do it.
package receiptread

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/streamread"
	"github.com/windlass-dev/windlass/receipt"
)

// ErrNoResult is returned when the call has no stored result (yet, or any
// more: the results stream keeps them for its max age).
var ErrNoResult = errors.New("receipt: the call has no stored result")

// Checked is what a check of a stored result's receipt found.
type Checked struct {
	// Receipt is the decoded receipt (partial or zero when it could not be
	// read).
	Receipt receipt.Receipt
	// Header is the receipt's header form as stored.
	Header string
	// ResultSHA256 is receipt.ResultHash of the stored result's body.
	ResultSHA256 string
	// Key is the published key the receipt names, when it was found.
	Key *receipt.PublishedKey
	// Err is the failed check (a *receipt.CheckError), nil when the
	// receipt verified.
	Err error
}

// Check reads the result stored for callID in the results stream (as its
// leader says: see streamread) and checks its receipt with keys. The
// returned error is for what kept the check from being made (the stream or
// the keys unreachable, no stored result); a receipt that fails is
// reported in Checked.Err.
func Check(ctx context.Context, nc *nats.Conn, results jetstream.Stream, keys receipt.Keys, callID string) (Checked, error) {
	m, err := streamread.FirstMsg(ctx, nc, results, layout.ResultByCall(callID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Checked{}, fmt.Errorf("%w: %q", ErrNoResult, callID)
	case err != nil:
		return Checked{}, fmt.Errorf("receipt: read the stored result of %q: %w", callID, err)
	}
	c := Checked{Header: m.Header.Get(layout.HeaderReceipt), ResultSHA256: receipt.ResultHash(m.Data)}
	var found receipt.PublishedKey
	recording := receipt.KeysFunc(func(ctx context.Context, id string) (receipt.PublishedKey, error) {
		pk, err := keys.ReceiptKey(ctx, id)
		if err == nil {
			found = pk
			c.Key = &found
		}
		return pk, err
	})
	c.Receipt, c.Err = receipt.NewChecker(recording).Check(ctx, callID, c.Header, m.Data)
	if c.Err != nil && receipt.CheckOf(c.Err) == "" {
		return c, c.Err // the keys could not be read: no verdict
	}
	return c, nil
}

// Report is a check in JSON: the answer of the approval service's
// GET /v1/approvals/{id}/receipt and of `windlass receipt verify --json`.
type Report struct {
	// CallID is the call.
	CallID string `json:"call_id"`
	// Verified is true when the receipt verified: signed by a published
	// key of the worker it names, unaltered, over the stored result.
	Verified bool `json:"verified"`
	// FailedCheck names the check that failed (receipt.Check), and Error
	// says what was wrong, when Verified is false.
	FailedCheck string `json:"failed_check,omitempty"`
	Error       string `json:"error,omitempty"`
	// Receipt is the receipt as decoded; absent when it could not be.
	Receipt *View `json:"receipt,omitempty"`
	// Encoded is the receipt's header form as stored (Windlass-Receipt):
	// what a third party verifies for itself.
	Encoded string `json:"encoded,omitempty"`
	// ResultSHA256 is the SHA-256 of the stored result's body, which the
	// receipt's result_hash must equal.
	ResultSHA256 string `json:"result_sha256"`
	// PublicKey is the worker key the receipt names ("ed25519:<base64>"),
	// and KeyWorkers the workers that published it; absent when it was
	// not found.
	PublicKey  string   `json:"public_key,omitempty"`
	KeyWorkers []string `json:"key_workers,omitempty"`
}

// View is a receipt in JSON, its signature in standard base64.
type View struct {
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

// Report returns c as a [Report] for callID.
func (c Checked) Report(callID string) Report {
	out := Report{CallID: callID, Verified: c.Err == nil, Encoded: c.Header, ResultSHA256: c.ResultSHA256}
	if c.Err != nil {
		out.FailedCheck, out.Error = string(receipt.CheckOf(c.Err)), c.Err.Error()
	}
	if r := c.Receipt; r.KeyID != "" {
		out.Receipt = &View{CallID: r.CallID, Tool: r.Tool, SpecHash: r.SpecHash, ArgsHash: r.ArgsHash, ReleaseID: r.ReleaseID,
			ApprovedBy: r.ApprovedBy, ResultHash: r.ResultHash, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
			Worker: r.Worker, KeyID: r.KeyID, Signature: base64.StdEncoding.EncodeToString(r.Signature)}
	}
	if c.Key != nil {
		out.PublicKey, out.KeyWorkers = "ed25519:"+base64.StdEncoding.EncodeToString(c.Key.Key), c.Key.Workers
	}
	return out
}
