// Package retry is the one way the fleet retries its infrastructure: a
// publish the stream did not acknowledge, a read a store could not answer
// now, a connection that dropped, a pull that failed. Each loop states its
// policy in one line, a [Policy] literal; the waits come from
// github.com/cenkalti/backoff/v4 (exponential, doubling, ±20% jitter), and
// the bounds on one request to a store are named here once
// ([ReadTimeout], [WriteTimeout]).
//
// A tool's own retries (a retryable error, answered again after a delay)
// are the worker's RetryPolicy; its delays come from [Policy.Delay] too.
package retry

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// ReadTimeout bounds one read of a stream, a bucket or a store. A request
// whose reply was lost (sent as the server went down, or before its
// streams were back after a restart) otherwise waits out the caller's whole
// context, which for a call is its deadline: seen as a call refused after
// 90 s in the NATS restart fault test.
const ReadTimeout = 2 * time.Second

// WriteTimeout bounds one write whose acknowledgement is awaited: a publish
// to a stream, a registry withdrawal, a telemetry flush.
const WriteTimeout = 5 * time.Second

// Policy says how an operation is retried. The zero Policy retries at once,
// then after waits doubling from 0: set Initial.
type Policy struct {
	// Initial is the wait after the first failed attempt; each later wait
	// doubles, with ±20% jitter.
	Initial time.Duration
	// Max caps one wait. Default 2s.
	Max time.Duration
	// For bounds the whole operation, counted from its first attempt: no
	// attempt starts past it. Zero: until ctx ends.
	For time.Duration
	// Attempts bounds the attempts, the first included. Zero: unbounded.
	Attempts int
	// PerAttempt bounds each attempt: op's context ends after it. Zero:
	// the attempt has ctx as it is.
	PerAttempt time.Duration
}

// DefaultMax is the cap on one wait when Policy.Max is zero.
const DefaultMax = 2 * time.Second

// The jitter and growth of every wait: doubling, ±20%.
const (
	multiplier = 2
	jitter     = 0.2
)

// Permanent marks err as not worth another attempt (the same request never
// succeeds: a message over the max payload, a refusal); [Do] returns err
// itself.
func Permanent(err error) error { return backoff.Permanent(err) }

// Do calls op until it returns nil or a [Permanent] error, the policy runs
// out or ctx ends, and returns op's last error (unwrapped from Permanent),
// or nil. The first attempt allocates nothing for the policy: the usual case
// pays only for op.
func Do(ctx context.Context, p Policy, op func(context.Context) error) error {
	start := time.Now()
	err := p.attempt(ctx, op)
	if err == nil {
		return nil
	}
	if perm, ok := permanent(err); ok {
		return perm
	}
	b := p.backOff(time.Since(start))
	for n := 2; p.Attempts == 0 || n <= p.Attempts; n++ {
		wait := b.NextBackOff()
		if wait == backoff.Stop || !Sleep(ctx, wait) {
			return err
		}
		if err = p.attempt(ctx, op); err == nil {
			return nil
		}
		if perm, ok := permanent(err); ok {
			return perm
		}
	}
	return err
}

// Value is [Do] for an operation that returns a value: the value of the
// attempt that succeeded, or of the last one.
func Value[T any](ctx context.Context, p Policy, op func(context.Context) (T, error)) (T, error) {
	var v T
	err := Do(ctx, p, func(ctx context.Context) error {
		var err error
		v, err = op(ctx)
		return err
	})
	return v, err
}

// Delay is the wait before attempt n+1 after the n'th attempt (1-based)
// failed: Initial doubled n-1 times, capped at Max, with jitter.
func (p Policy) Delay(n int) time.Duration {
	b := p.backOff(0)
	wait := b.NextBackOff()
	for i := 1; i < n && wait != backoff.Stop; i++ {
		wait = b.NextBackOff()
	}
	return wait
}

// Waits returns the policy's waits one after another, for a loop that is not
// one operation (a session that reconnects, a pull loop): Next gives the
// wait after a failure, Reset starts again after a success. For and
// Attempts do not apply.
func (p Policy) Waits() *Waits {
	p.For = 0
	return &Waits{b: p.backOff(0)}
}

// Waits is a sequence of a [Policy]'s waits; see [Policy.Waits].
type Waits struct{ b *backoff.ExponentialBackOff }

// Next returns the wait after one more failure.
func (w *Waits) Next() time.Duration { return w.b.NextBackOff() }

// Reset starts the sequence again: the next wait is the policy's Initial.
func (w *Waits) Reset() { w.b.Reset() }

// Sleep waits d, or less when ctx ends first; it reports whether the whole
// wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attempt runs op once, bounded by PerAttempt.
func (p Policy) attempt(ctx context.Context, op func(context.Context) error) error {
	if p.PerAttempt <= 0 {
		return op(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, p.PerAttempt)
	defer cancel()
	return op(ctx)
}

// backOff is the policy's schedule, with spent of its For gone already.
// backoff.Stop ends it once For is spent.
func (p Policy) backOff(spent time.Duration) *backoff.ExponentialBackOff {
	elapsed := time.Duration(0) // backoff/v4: zero means no bound
	if p.For > 0 {
		elapsed = max(p.For-spent, time.Nanosecond)
	}
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.Initial),
		backoff.WithMaxInterval(cmp.Or(p.Max, DefaultMax)),
		backoff.WithMultiplier(multiplier),
		backoff.WithRandomizationFactor(jitter),
		backoff.WithMaxElapsedTime(elapsed),
	)
}

func permanent(err error) (error, bool) {
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return perm.Err, true
	}
	return nil, false
}
