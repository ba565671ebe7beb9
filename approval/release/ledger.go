package release

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ledger records, in Redis, which stream message first used each release,
// making releases single-use. Keys: <prefix>release:<call id> → the stream
// sequence, expiring with the release.
type Ledger struct {
	client redis.UniversalClient
	prefix string
}

// NewLedger returns a ledger over client; prefix defaults to "windlass:".
func NewLedger(client redis.UniversalClient, prefix string) *Ledger {
	return &Ledger{client: client, prefix: cmp.Or(prefix, "windlass:")}
}

// claimScript stores the sequence if the key is absent and returns the
// stored one.
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`)

// ErrReused is returned by [Ledger.Claim] when another message already used
// the release.
var ErrReused = fmt.Errorf("%w: already used by another message", ErrInvalid)

// Claim binds the release of callID to the stream message seq until
// expires. Claiming again with the same seq (a redelivery) succeeds; with
// another seq it fails with [ErrReused].
func (l *Ledger) Claim(ctx context.Context, callID string, seq uint64, expires time.Time) error {
	ttl := max(time.Until(expires), time.Second) + time.Minute
	got, err := claimScript.Run(ctx, l.client, []string{l.prefix + "release:" + callID}, seq, ttl.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("release: ledger: %w", err)
	}
	if got != strconv.FormatUint(seq, 10) {
		return fmt.Errorf("%w (stream sequence %s, this one %d)", ErrReused, got, seq)
	}
	return nil
}
