package release

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
)

// Ledger makes releases single-use. It records, in a JetStream key-value
// bucket (layout.ReleasesBucket, replicated like the streams), which stream
// message first presented each call's release: key the call's token, value
// the message's sequence in the calls stream, written with create-only
// semantics and kept until the release expires. A redelivery of that
// message claims again and may run (at least once); any other message —
// an exact copy published under another message id — may not.
//
// The ledger lives in NATS, not in Redis: a Redis that restarts empty or
// fails over to a replica that missed a write would forget a use, and a
// copy of an approved message would run the call again.
type Ledger struct {
	kv jetstream.KeyValue
}

// NewLedger returns a ledger over kv, the bucket layout.EnsureReleases
// returns.
func NewLedger(kv jetstream.KeyValue) *Ledger { return &Ledger{kv: kv} }

// ErrReused is wrapped by the error of [Ledger.Claim] when another message
// already used the release.
var ErrReused = &InvalidError{Reason: ReasonReused, Detail: "already used by another message"}

// minClaimTTL is the shortest a claim is kept (JetStream's per-message TTL
// has a one-second granularity); a claim is kept a minute past its
// release's expiry, for clocks that disagree.
const (
	minClaimTTL = time.Second
	claimGrace  = time.Minute
)

// Claim binds the release of callID to the calls stream's message seq
// until expires. Claiming again with the same seq (a redelivery) succeeds
// with fresh false; the first claim reports fresh true. With another seq
// it fails with an error wrapping [ErrReused] (and [ErrInvalid]). Any
// other error means the ledger could not say (NATS unreachable): the
// caller must not run the call, nor refuse it for good.
func (l *Ledger) Claim(ctx context.Context, callID string, seq uint64, expires time.Time) (fresh bool, err error) {
	key := layout.CallToken(callID)
	value := []byte(strconv.FormatUint(seq, 10))
	ttl := max(time.Until(expires), minClaimTTL) + claimGrace
	_, err = l.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl.Round(time.Second)))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return false, fmt.Errorf("release: ledger: claim %q: %w", callID, err)
	}
	e, err := l.kv.Get(ctx, key)
	if err != nil {
		// Expired or deleted between the two requests: claim again once.
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err = l.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl.Round(time.Second))); err == nil {
				return true, nil
			}
		}
		return false, fmt.Errorf("release: ledger: read the claim of %q: %w", callID, err)
	}
	if string(e.Value()) != string(value) {
		return false, &InvalidError{Reason: ReasonReused, Detail: fmt.Sprintf("already used by another message (stream sequence %s, this one %d)", e.Value(), seq)}
	}
	return false, nil
}
