package receipt_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/windlass-dev/windlass/receipt"
)

// A worker signs a receipt for the result it stores; anyone holding the
// published key checks it against the stored result later.
func Example() {
	seed := make([]byte, ed25519.SeedSize) // a fixed key, for a fixed output
	signer := receipt.NewSigner(ed25519.NewKeyFromSeed(seed), "worker-1")

	stored := []byte(`{"call_id":"c1","name":"transfer_funds","content":"sent","is_error":false,"duration_ms":3}`)
	start := time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)
	r := signer.Sign(receipt.Receipt{
		CallID: "c1", Tool: "transfer_funds", SpecHash: "spec-hash", ArgsHash: "args-hash",
		ReleaseID: "release-id", ApprovedBy: []string{"alice"},
		ResultHash: receipt.ResultHash(stored), StartedAt: start, FinishedAt: start.Add(3 * time.Millisecond),
	})
	header, err := receipt.Encode(r)
	if err != nil {
		panic(err)
	}

	published := receipt.KeysFunc(func(_ context.Context, keyID string) (receipt.PublishedKey, error) {
		if keyID != signer.KeyID() {
			return receipt.PublishedKey{}, receipt.ErrKeyNotFound
		}
		return receipt.PublishedKey{Key: signer.PublicKey(), Workers: []string{"worker-1"}}, nil
	})
	checker := receipt.NewChecker(published)
	got, err := checker.Check(context.Background(), "c1", header, stored)
	fmt.Println(got.Tool, got.ApprovedBy, got.Worker, err)

	_, err = checker.Check(context.Background(), "c1", header, []byte(`{"content":"not sent"}`))
	fmt.Println(receipt.CheckOf(err))
	// Output:
	// transfer_funds [alice] worker-1 <nil>
	// result_hash
}
