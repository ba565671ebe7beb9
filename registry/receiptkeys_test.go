package registry_test

import (
	"crypto/ed25519"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/receipt"
)

// TestReceiptKeyOutlivesItsWorker: a receipt key is published for its
// retention, not the worker's lease; a second worker with the same key is
// recorded beside the first; a different key is never written under a
// published id; a key nobody published is not found.
func TestReceiptKeyOutlivesItsWorker(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	reg := newRegistry(t, rs, 0)
	ctx := t.Context()
	key, _ := receipt.GenerateKey()
	pub := key.Public().(ed25519.PublicKey)
	id := receipt.KeyID(pub)

	if _, err := reg.ReceiptKey(ctx, id); !errors.Is(err, receipt.ErrKeyNotFound) {
		t.Fatalf("an unpublished key: err %v, want ErrKeyNotFound", err)
	}
	if err := reg.PublishReceiptKey(ctx, pub, "w1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := reg.PublishReceiptKey(ctx, pub, "w2", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := reg.ReceiptKey(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Key.Equal(pub) || !slices.Equal(got.Workers, []string{"w1", "w2"}) || got.PublishedAt.IsZero() {
		t.Fatalf("published key = %+v", got)
	}
	// Its life is the retention (the longer one asked), not a lease's TTL.
	ttl, err := rs.Client(t).PTTL(ctx, "windlass:{registry}:receiptkey:"+id).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 59*time.Minute || ttl > time.Hour {
		t.Fatalf("the key expires in %s, want about the 1h retention", ttl)
	}
	// Another key written under the id by hand is refused.
	rc := rs.Client(t)
	other, _ := receipt.GenerateKey()
	if err := rc.HSet(ctx, "windlass:{registry}:receiptkey:"+receipt.KeyID(other.Public().(ed25519.PublicKey)), "key", "AAAA").Err(); err != nil {
		t.Fatal(err)
	}
	if err := reg.PublishReceiptKey(ctx, other.Public().(ed25519.PublicKey), "w3", 0); err == nil {
		t.Fatal("a key was published over another under its id")
	}
}
