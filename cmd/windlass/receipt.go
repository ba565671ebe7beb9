package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/receiptread"
	"github.com/windlass-dev/windlass/receipt"
)

// runReceipt is `windlass receipt verify CALL_ID`: it checks the
// execution receipt stored with the call's result against the worker keys
// published in the registry (or the keys given with --key), and the
// result's hash against the stored result. Exit 0: verified; 1: a check
// failed (named); 3: nothing to check (no result) or the fleet
// unreachable; 2: bad usage.
func runReceipt(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("receipt", "receipt verify CALL_ID [--json] [--key ed25519:<base64 public key>,...]", stderr)
	c := commonFlags(fs)
	asJSON := boolFlag(fs, "json", false, "print the check as JSON (the approval API's receipt answer)")
	pinned := stringFlag(fs, "key", "", "comma-separated worker public keys (ed25519:<base64>) to trust instead of the registry's published keys")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "verify" {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("receipt needs: verify CALL_ID")}
	}
	callID := pos[1]
	var keys receipt.Keys
	if *pinned != "" {
		if keys, err = pinnedKeys(*pinned); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	sess, err := c.open("receipt", stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	if keys == nil {
		keys = sess.reg
	}
	js, err := jetstream.New(sess.nc)
	if err != nil {
		return err
	}
	results, err := js.Stream(ctx, layout.ResultsStream)
	if err != nil {
		return &exitError{code: 3, err: fmt.Errorf("receipt verify %s: the results stream: %w", callID, err)}
	}
	checked, err := receiptread.Check(ctx, sess.nc, results, keys, callID)
	if err != nil {
		return &exitError{code: 3, err: fmt.Errorf("receipt verify %s: %w", callID, err)}
	}
	if *asJSON {
		if err := printJSON(stdout, checked.Report(callID)); err != nil {
			return err
		}
	} else if checked.Err == nil {
		printReceipt(stdout, checked)
	}
	if checked.Err != nil {
		return &exitError{code: 1, err: fmt.Errorf("receipt verify %s: NOT verified: %w", callID, checked.Err)}
	}
	return nil
}

// pinnedKeys are the keys of --key, good for any worker id.
func pinnedKeys(list string) (receipt.Keys, error) {
	byID := map[string]receipt.PublishedKey{}
	for _, k := range splitList(list) {
		pub, err := release.ParsePublicKey(k) // the same "ed25519:<base64>" form
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		byID[receipt.KeyID(pub)] = receipt.PublishedKey{Key: pub}
	}
	return receipt.KeysFunc(func(_ context.Context, id string) (receipt.PublishedKey, error) {
		pk, ok := byID[id]
		if !ok {
			return pk, fmt.Errorf("%w: %q is none of the keys given with --key", receipt.ErrKeyNotFound, id)
		}
		return pk, nil
	}), nil
}

// printReceipt writes what a verified receipt attests.
func printReceipt(w io.Writer, c receiptread.Checked) {
	r := c.Receipt
	fmt.Fprintf(w, "verified: receipt of call %s\n", r.CallID)
	fmt.Fprintf(w, "  tool:      %s (spec %s)\n", r.Tool, r.SpecHash)
	fmt.Fprintf(w, "  arguments: sha256 %s (canonical)\n", orNone(r.ArgsHash, "not read"))
	if r.ReleaseID != "" {
		fmt.Fprintf(w, "  release:   %s, approved by %s\n", r.ReleaseID, strings.Join(r.ApprovedBy, ", "))
	} else {
		fmt.Fprintln(w, "  release:   none (an ungated call)")
	}
	fmt.Fprintf(w, "  result:    sha256 %s (the stored result's)\n", r.ResultHash)
	fmt.Fprintf(w, "  worker:    %s (key %s)\n", r.Worker, r.KeyID)
	if r.StartedAt.IsZero() {
		fmt.Fprintln(w, "  ran:       no (answered without running)")
	} else {
		fmt.Fprintf(w, "  ran:       %s to %s (%s)\n", r.StartedAt.UTC().Format(time.RFC3339Nano), r.FinishedAt.UTC().Format(time.RFC3339Nano), r.FinishedAt.Sub(r.StartedAt))
	}
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}
