package registry

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/receipt"
)

// DefaultReceiptKeyRetention is how long a worker's receipt key stays
// published after the worker's last refresh of it: receipts verify for at
// least that long after the worker stopped.
const DefaultReceiptKeyRetention = 30 * 24 * time.Hour

// The receipt keys' layout (see the package doc, "Redis layout"): one hash
// per key id, in the {registry} slot.
func (r *Registry) receiptKeyKey(keyID string) string {
	return r.cfg.Prefix + "{registry}:receiptkey:" + keyID
}

// receiptKeyScript publishes a worker's receipt key under its id. A
// different key under the id is refused (the id is the key's hash: someone
// wrote the hash by hand); the worker is added to the key's workers; the
// hash lives at least retention from now.
//
// KEYS: the key's hash. ARGV: public key (base64), worker id, now_ms,
// retention_ms. Returns 'ok' or 'conflict'.
var receiptKeyScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'key')
if cur and cur ~= ARGV[1] then
  return 'conflict'
end
if not cur then
  redis.call('HSET', KEYS[1], 'key', ARGV[1], 'published_ms', ARGV[3])
end
if redis.call('HEXISTS', KEYS[1], 'w:' .. ARGV[2]) == 0 then
  redis.call('HSET', KEYS[1], 'w:' .. ARGV[2], ARGV[3])
end
local retention = tonumber(ARGV[4])
if redis.call('PTTL', KEYS[1]) < retention then
  redis.call('PEXPIRE', KEYS[1], retention)
end
return 'ok'
`)

// PublishReceiptKey publishes a worker's public receipt key under its key
// id (receipt.KeyID), recording the worker's id with it, for at least
// retention from now (0 means DefaultReceiptKeyRetention). Publishing again
// refreshes the retention: a worker does so while it runs, so its key
// lives retention past its last refresh. It never replaces a different
// key published under the same id, and never shortens a retention.
func (r *Registry) PublishReceiptKey(ctx context.Context, pub ed25519.PublicKey, workerID string, retention time.Duration) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("registry: receipt key: want a %d-byte Ed25519 public key, got %d bytes", ed25519.PublicKeySize, len(pub))
	}
	if workerID == "" || strings.ContainsAny(workerID, " \t\r\n") {
		return fmt.Errorf("registry: receipt key: worker id %q must be non-empty without spaces", workerID)
	}
	if retention < 0 {
		return fmt.Errorf("registry: receipt key: retention must not be negative, got %s", retention)
	}
	if retention == 0 {
		retention = DefaultReceiptKeyRetention
	}
	id := receipt.KeyID(pub)
	res, err := receiptKeyScript.Run(ctx, r.cfg.Client, []string{r.receiptKeyKey(id)},
		base64.StdEncoding.EncodeToString(pub), workerID, time.Now().UnixMilli(), retention.Milliseconds()).Text()
	switch {
	case err != nil:
		return fmt.Errorf("registry: publish receipt key %s: %w", id, err)
	case res == "conflict":
		return fmt.Errorf("registry: publish receipt key %s: another key is published under its id (the id is the key's hash; someone wrote it by hand)", id)
	}
	return nil
}

// ReceiptKey returns the receipt key published under keyID and the
// workers that published it; an error wrapping receipt.ErrKeyNotFound when
// none is (never published, or past its retention). It implements
// receipt.Keys.
func (r *Registry) ReceiptKey(ctx context.Context, keyID string) (receipt.PublishedKey, error) {
	h, err := r.cfg.Client.HGetAll(ctx, r.receiptKeyKey(keyID)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return receipt.PublishedKey{}, fmt.Errorf("registry: read receipt key %q: %w", keyID, err)
	}
	if h["key"] == "" {
		return receipt.PublishedKey{}, fmt.Errorf("%w: %q", receipt.ErrKeyNotFound, keyID)
	}
	pub, err := base64.StdEncoding.DecodeString(h["key"])
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return receipt.PublishedKey{}, fmt.Errorf("registry: receipt key %q: not a base64 Ed25519 public key", keyID)
	}
	pk := receipt.PublishedKey{Key: pub}
	if ms, err := strconv.ParseInt(h["published_ms"], 10, 64); err == nil {
		pk.PublishedAt = time.UnixMilli(ms)
	}
	for f := range h {
		if w, ok := strings.CutPrefix(f, "w:"); ok {
			pk.Workers = append(pk.Workers, w)
		}
	}
	slices.Sort(pk.Workers)
	return pk, nil
}
