package worker

import (
	"fmt"
	"time"

	"github.com/windlass-dev/windlass/internal/retry"
)

// RetryPolicy says how a tool's retryable failures are retried: a tool marks
// an error retryable with [windlass.Retryable] (or [windlass.RetryAfter]);
// every other error is answered at once. Retries are further bounded by the
// call's deadline and by Config.MaxDeliver, which counts every delivery of
// a call, retried or redelivered after a lost worker.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of a call, the first included.
	// 1 disables retries. Default 3.
	MaxAttempts int
	// InitialBackoff is the delay before the second attempt; each later
	// one doubles it, with ±20% jitter. Default 1s.
	InitialBackoff time.Duration
	// MaxBackoff caps the delay. Default 30s.
	MaxBackoff time.Duration
	// RetryTimeouts retries an attempt that ran out of the tool's own
	// per-attempt timeout (never one that ran out of the call's deadline).
	// Default false: a tool's timeout is usually a property of the input.
	RetryTimeouts bool
}

// Defaults of [RetryPolicy].
const (
	DefaultMaxAttempts    = 3
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	return p
}

func (p RetryPolicy) validate(maxDeliver int) error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("retry policy: MaxAttempts must not be negative, got %d", p.MaxAttempts)
	case p.InitialBackoff < 0 || p.MaxBackoff < 0:
		return fmt.Errorf("retry policy: backoffs must not be negative, got %s and %s", p.InitialBackoff, p.MaxBackoff)
	case p.MaxAttempts > maxDeliver:
		return fmt.Errorf("retry policy: MaxAttempts (%d) must not exceed the worker's Config.MaxDeliver (%d), which bounds every delivery of a call", p.MaxAttempts, maxDeliver)
	}
	return nil
}

// backoff is the delay after the failed attempt'th attempt (1-based),
// or asked, when the tool asked for a longer one.
func (p RetryPolicy) backoff(attempt int, asked time.Duration) time.Duration {
	return max(retry.Policy{Initial: min(p.InitialBackoff, p.MaxBackoff), Max: p.MaxBackoff}.Delay(attempt), asked)
}

// WithRetry sets the tool's retry policy. Default: [RetryPolicy] defaults
// (3 attempts, 1s doubling to 30s).
func WithRetry(p RetryPolicy) ToolOption { return func(c *toolConfig) { c.retry = p } }
