// Package receiptread reads a call's stored result and checks the
// execution receipt it carries (package receipt), the one way the approval
// service's receipt endpoint and `windlass receipt verify` do it.
package receiptread

import (
	"context"
	"errors"
	"fmt"

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
