package receipt

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"
)

// KeyID names a worker's public key: the hex of the first 16 bytes of its
// SHA-256. A verifier recomputes it from the key it fetched, so a key
// published under another key's id does not verify.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

// Signer signs receipts with one worker's private key. Safe for concurrent
// use.
type Signer struct {
	key    ed25519.PrivateKey
	keyID  string
	worker string
}

// NewSigner returns a signer for the worker named worker, with key.
func NewSigner(key ed25519.PrivateKey, worker string) *Signer {
	return &Signer{key: key, keyID: KeyID(key.Public().(ed25519.PublicKey)), worker: worker}
}

// KeyID returns the id of the signer's public key.
func (s *Signer) KeyID() string { return s.keyID }

// PublicKey returns the signer's public key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Worker returns the worker id the signer writes into receipts.
func (s *Signer) Worker() string { return s.worker }

// Sign fills in r's version, worker and key id, signs it and returns it.
func (s *Signer) Sign(r Receipt) Receipt {
	r.Version, r.Worker, r.KeyID = Version, s.worker, s.keyID
	r.Signature = ed25519.Sign(s.key, r.Canonical())
	return r
}

// Verify checks r's signature with pub: pub must be the key r.KeyID names
// (CheckKey), and the signature must cover r as it is (CheckSignature).
// It does not look at the result: see [Checker.Check].
func Verify(r Receipt, pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize || KeyID(pub) != r.KeyID {
		return checkFailed(CheckKey, "the public key given is not key %q", r.KeyID)
	}
	if !ed25519.Verify(pub, r.Canonical(), r.Signature) {
		return checkFailed(CheckSignature, "the signature does not verify with key %s: the receipt was altered or signed by another key", r.KeyID)
	}
	return nil
}

// PublishedKey is a worker's public key as the fleet publishes it.
type PublishedKey struct {
	// Key is the public key.
	Key ed25519.PublicKey
	// Workers are the ids of the workers that published it: one, unless
	// several workers were given the same key file. Empty for a key
	// pinned out of band, which vouches for any worker id.
	Workers []string
	// PublishedAt is when it was first published.
	PublishedAt time.Time
}

// ErrKeyNotFound is returned by a [Keys] for a key id nobody published
// (or whose retention ran out).
var ErrKeyNotFound = errors.New("receipt: key not published")

// Keys finds published worker keys; registry.Registry is one.
type Keys interface {
	// ReceiptKey returns the key published under keyID, or an error
	// wrapping [ErrKeyNotFound].
	ReceiptKey(ctx context.Context, keyID string) (PublishedKey, error)
}

// KeysFunc adapts a function to [Keys].
type KeysFunc func(ctx context.Context, keyID string) (PublishedKey, error)

// ReceiptKey calls f.
func (f KeysFunc) ReceiptKey(ctx context.Context, keyID string) (PublishedKey, error) {
	return f(ctx, keyID)
}

// Checker verifies stored receipts against published keys.
type Checker struct {
	keys Keys
}

// NewChecker returns a checker that finds keys in keys.
func NewChecker(keys Keys) *Checker { return &Checker{keys: keys} }

// Check verifies the receipt header (its header form, see [Encode]) of the
// result stored for callID, whose message body is body: it is readable,
// for callID, signed by a key published by the worker it names, its
// signature verifies, and its result hash is the body's. It returns the
// receipt, and a [*CheckError] naming the first check that failed. An
// error reaching the keys that is not ErrKeyNotFound is returned as it
// is (wrapped), not as a failed check: the receipt may be fine.
func (c *Checker) Check(ctx context.Context, callID, header string, body []byte) (Receipt, error) {
	if header == "" {
		return Receipt{}, checkFailed(CheckMissing, "the stored result of call %q carries no receipt", callID)
	}
	r, err := Decode(header)
	if err != nil {
		return r, err
	}
	if r.CallID != callID {
		return r, checkFailed(CheckCall, "the receipt is for call %q, not %q", r.CallID, callID)
	}
	pk, err := c.keys.ReceiptKey(ctx, r.KeyID)
	switch {
	case errors.Is(err, ErrKeyNotFound):
		return r, &CheckError{Check: CheckKey, Detail: fmt.Sprintf("key %q is not published (never, or past its retention)", r.KeyID), Err: err}
	case err != nil:
		return r, fmt.Errorf("receipt: fetch key %q: %w", r.KeyID, err)
	case len(pk.Workers) > 0 && !slices.Contains(pk.Workers, r.Worker):
		return r, checkFailed(CheckKey, "key %q was published by workers %q, the receipt names worker %q", r.KeyID, pk.Workers, r.Worker)
	}
	if err := Verify(r, pk.Key); err != nil {
		return r, err
	}
	if got := ResultHash(body); got != r.ResultHash {
		return r, checkFailed(CheckResult, "the stored result hashes to %s, the receipt signs %s: the result was altered after signing", got, r.ResultHash)
	}
	return r, nil
}
