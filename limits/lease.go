package limits

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// rateLease is one dispatcher's share of a tool × key's admission rate:
// tokens charged to the shared rate in Redis a few at a time and handed
// out here, so a key calling many times a second costs one round trip a
// lease, not one a call. The rate across dispatchers stays exact — every
// token is charged in Redis before it is handed out — at two prices:
//
//   - A lease's tokens lapse unused leaseLife after it was taken (its
//     key's calls stopped): at most one lease per dispatcher is lost, up
//     to leaseLife's worth of the rate.
//   - Calls may start up to leaseLife after their token was charged, so
//     in any window up to one lease per dispatcher more calls than the
//     rate allows in that window may start (never more over a period).
//
// A refusal is kept too: Redis says when its next token comes, and no
// dispatcher can have one before, so until then this one refuses its
// calls without asking — a key that floods costs Redis one ask per token.
// (A rate too small for leases keeps its refusals in one: chargeEach.)
//
// A lease is sized by the calls this dispatcher admitted in the last
// leaseLife, or by the calls waiting for it if more, and is at most
// leaseSize: a rate whose quarter burst or leaseLife's worth is one call
// or less is asked on every call, as before leases (BENCHMARKS.md,
// "Limits": at 64 calls in flight a rate asked on every call cost a
// quarter of the fleet's throughput).
type rateLease struct {
	mu       sync.Mutex
	left     int           // tokens charged and not handed out yet
	until    time.Time     // when they lapse
	fetching chan struct{} // closed when the lease being taken is in; nil when none is
	refused  time.Time     // Redis had no token before then: calls till then are refused here

	waiting int // calls waiting for the lease being taken: the next one is sized for them too

	served int       // calls admitted since window
	window time.Time // when the current window of leaseLife started
	demand int       // calls admitted in the last full window

	used time.Time // when a call last asked it
	gone bool      // forgotten by a sweep: a call that finds it so asks the map again
}

// leaseIdle is how long a lease goes unasked before a sweep forgets it:
// a dispatcher serving many keys in turn would otherwise keep one lease
// for every tool × key × rate it ever saw. Forgetting an idle lease costs
// nothing: its tokens lapsed long before (leaseLife), and a refusal it
// kept only spares Redis one ask.
const leaseIdle = time.Minute

// sweepLeases forgets the leases unasked for leaseIdle, at most once a
// leaseIdle, on the goroutine of the call that finds one due (a walk of
// the leases, each locked in turn: microseconds for thousands).
func (e *Enforcer) sweepLeases(now time.Time) {
	last := e.swept.Load()
	if now.UnixNano()-last < int64(leaseIdle) || !e.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	e.leases.Range(func(k, v any) bool {
		l := v.(*rateLease)
		l.mu.Lock()
		if now.Sub(l.used) >= leaseIdle && l.fetching == nil && l.waiting == 0 {
			l.gone = true
			e.leases.CompareAndDelete(k, l)
		}
		l.mu.Unlock()
		return true
	})
}

// leaseOf is the lease of k, made on its first call.
func (e *Enforcer) leaseOf(k leaseKey) *rateLease {
	if v, ok := e.leases.Load(k); ok {
		return v.(*rateLease)
	}
	v, _ := e.leases.LoadOrStore(k, &rateLease{used: time.Now()}) // used at once: a sweep under way keeps it
	return v.(*rateLease)
}

// leaseLife is how long a lease's tokens may be handed out.
const leaseLife = 20 * time.Millisecond

// leaseSize is the most tokens of r one lease takes: a quarter of its
// burst, and no more than leaseLife's worth of it.
func leaseSize(r Rate) int {
	perLife := int(float64(r.Events) * float64(leaseLife) / float64(r.Per))
	return max(1, min(r.burst()/4, perLife))
}

// count counts a call admitted at now, in l's windows; l.mu is held.
func (l *rateLease) count(now time.Time) {
	switch since := now.Sub(l.window); {
	case since >= 2*leaseLife:
		l.demand, l.served, l.window = 0, 0, now
	case since >= leaseLife:
		l.demand, l.served, l.window = l.served, 0, now
	}
	l.served++
}

// charge admits one call under k's rate from its lease, taking a lease
// from Redis when it has no token left; refused with ReasonRate when
// Redis has none either.
func (e *Enforcer) charge(ctx context.Context, k leaseKey, size int) (Decision, error) {
	tool, key, r := k.tool, k.key, k.rate
	l := e.leaseOf(k)
	for {
		l.mu.Lock()
		if l.gone { // forgotten since it was looked up
			l.mu.Unlock()
			l = e.leaseOf(k)
			continue
		}
		now := time.Now()
		l.used = now
		if l.left > 0 && now.Before(l.until) {
			l.left--
			l.count(now)
			l.mu.Unlock()
			return Decision{Allowed: true}, nil
		}
		if now.Before(l.refused) { // no token exists before then, for anyone
			after := l.refused.Sub(now)
			l.mu.Unlock()
			return Decision{Reason: ReasonRate, RetryAfter: after}, nil
		}
		if wait := l.fetching; wait != nil {
			l.waiting++
			l.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
			}
			l.mu.Lock()
			l.waiting--
			l.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return Decision{}, fmt.Errorf("limits: rate of key %q for %q: %w", key, tool, err)
			}
			continue // its tokens, if any, are shared
		}
		want := max(1, min(size, max(l.demand, l.waiting+1)))
		done := make(chan struct{})
		l.fetching = done
		l.mu.Unlock()

		res, err := e.lease(ctx, tool, key, r, want)

		l.mu.Lock()
		l.fetching = nil
		close(done)
		if err != nil {
			l.mu.Unlock()
			return Decision{}, fmt.Errorf("limits: rate of key %q for %q: %w", key, tool, err)
		}
		if res.Allowed == 0 {
			l.refused = time.Now().Add(res.RetryAfter)
			l.mu.Unlock()
			return Decision{Reason: ReasonRate, RetryAfter: res.RetryAfter}, nil
		}
		now = time.Now()
		l.used = now // its waiters use it next: a sweep keeps it
		l.left, l.until = res.Allowed-1, now.Add(leaseLife)
		l.count(now)
		l.mu.Unlock()
		return Decision{Allowed: true}, nil
	}
}

// chargeEach admits one call under k's rate by asking Redis, unless a
// refusal Redis gave lately says no token exists yet: the charge of a rate
// too small for leases. Its lease holds only that refusal; the calls that
// ask at once ask Redis each (none waits for another's answer).
func (e *Enforcer) chargeEach(ctx context.Context, k leaseKey) (Decision, error) {
	l := e.leaseOf(k)
	l.mu.Lock()
	now := time.Now()
	l.used = now
	refused := l.refused
	l.mu.Unlock()
	if now.Before(refused) {
		return Decision{Reason: ReasonRate, RetryAfter: refused.Sub(now)}, nil
	}
	res, err := e.rates.Allow(ctx, e.keyRate(k.tool, k.key), redisLimit(k.rate))
	if err != nil {
		return Decision{}, fmt.Errorf("limits: rate of key %q for %q: %w", k.key, k.tool, err)
	}
	if res.Allowed == 0 {
		// A lease a sweep has just forgotten keeps this refusal for
		// nobody: the next call asks Redis again, as it would have.
		l.mu.Lock()
		if until := time.Now().Add(res.RetryAfter); until.After(l.refused) {
			l.refused = until
		}
		l.mu.Unlock()
		return Decision{Reason: ReasonRate, RetryAfter: res.RetryAfter}, nil
	}
	return Decision{Allowed: true}, nil
}

// lease charges want tokens of r at once, or, when fewer are left, one.
// (redis_rate's AllowAtMost would take what is left in one round trip,
// but it charges the fraction of a token it cannot hand out: a key over
// its rate got about three quarters of it.)
func (e *Enforcer) lease(ctx context.Context, tool, key string, r Rate, want int) (*redis_rate.Result, error) {
	res, err := e.rates.AllowN(ctx, e.keyRate(tool, key), redisLimit(r), want)
	if err != nil || res.Allowed > 0 || want == 1 {
		return res, err
	}
	return e.rates.AllowN(ctx, e.keyRate(tool, key), redisLimit(r), 1)
}
