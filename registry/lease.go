package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/windlass-dev/windlass/internal/retry"
)

// Lease is a worker's advertisement kept alive by heartbeats. Its methods
// are safe for concurrent use.
type Lease struct {
	reg     *Registry
	ad      Advertisement
	started time.Time

	cancel context.CancelFunc
	done   chan struct{}

	// st carries unannounced changes between attempts; only the first
	// advertisement, then the heartbeat goroutine, use it.
	st adState

	mu      sync.Mutex
	lastOK  time.Time
	lastErr error
}

// Advertise announces ad and keeps it alive: it writes the leases at once
// (returning a *[ConflictError] or the Redis error), then renews them every
// HeartbeatInterval until [Lease.Withdraw]: ctx bounds only the first write,
// and the caller owns the lease and must withdraw it. When a renewal
// fails (Redis unreachable), it retries with exponential backoff and
// re-advertises once Redis answers again; the worker keeps serving
// meanwhile.
func (r *Registry) Advertise(ctx context.Context, ad Advertisement) (*Lease, error) {
	if err := ad.validate(); err != nil {
		return nil, err
	}
	ad.Specs = append(ad.Specs[:0:0], ad.Specs...)
	l := &Lease{reg: r, ad: ad, started: time.Now(), done: make(chan struct{})}
	if err := r.advertiseOnce(ctx, ad, l.started, &l.st); err != nil {
		var conflict *ConflictError
		if errors.As(err, &conflict) && (l.st.holds || r.legacyOn()) {
			// Another worker took a tool between the two passes, or the
			// new layout refused what the legacy one took: give back
			// what this one took.
			_ = r.withdraw(ctx, ad.WorkerID, ad.names())
		}
		return nil, err
	}
	l.lastOK = time.Now()
	l.st.renewing = true // from here on, a conflict on one tool does not hold back the others
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.heartbeat(hbCtx)
	return l, nil
}

// heartbeat renews the lease until ctx is canceled by Withdraw.
func (l *Lease) heartbeat(ctx context.Context) {
	defer close(l.done)
	ticker := time.NewTicker(l.reg.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		failures := 0
		// Until Redis is back or the lease ends.
		policy := retry.Policy{Initial: 100 * time.Millisecond, Max: l.reg.cfg.HeartbeatInterval, PerAttempt: l.reg.cfg.HeartbeatInterval}
		_ = retry.Do(ctx, policy, func(opCtx context.Context) error {
			err := l.reg.advertiseOnce(opCtx, l.ad, l.started, &l.st)
			var conflict *ConflictError
			switch {
			case err == nil:
				if failures > 0 {
					l.reg.cfg.Logger.InfoContext(ctx, "registry: lease restored", "worker", l.ad.WorkerID, "failures", failures)
				}
				l.record(nil)
				return nil
			case errors.As(err, &conflict):
				// Another worker replaced the spec while this one lost its
				// lease (Redis restarted, or a long outage): keep trying;
				// the worker still serves its calls, which carry the hash.
				l.reg.cfg.Logger.WarnContext(ctx, "registry: lease refused after a spec change", "worker", l.ad.WorkerID, "error", err)
			default:
				l.reg.cfg.Logger.WarnContext(ctx, "registry: heartbeat failed; retrying", "worker", l.ad.WorkerID, "error", err)
			}
			failures++
			l.record(err)
			return err
		})
	}
}

func (l *Lease) record(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
	if err == nil {
		l.lastOK = time.Now()
	}
}

// Status returns when the lease was last renewed and the last renewal's
// error (nil when it succeeded).
func (l *Lease) Status() (lastRenewed time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastOK, l.lastErr
}

// Withdraw stops the heartbeats and removes the worker's leases, so
// dispatchers stop routing to it at once rather than after the TTL.
func (l *Lease) Withdraw(ctx context.Context) error {
	l.cancel()
	<-l.done
	return l.reg.withdraw(ctx, l.ad.WorkerID, l.ad.names())
}
