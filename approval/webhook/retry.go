package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// schedule is the backoff policy of one endpoint's delivery: exponential
// with jitter, raised to at least the Retry-After the last response asked
// for, stopping once the next attempt would start after maxElapsed.
// It is used by one goroutine.
type schedule struct {
	exp        *backoff.ExponentialBackOff
	maxElapsed time.Duration
	// floor is the Retry-After of the attempt that just failed; the
	// operation sets it before returning its error.
	floor time.Duration
	// chosen is told the delay picked after each failed attempt
	// (backoff.Stop when none follows).
	chosen func(time.Duration)
}

func newSchedule(initial, maxInterval, maxElapsed time.Duration, chosen func(time.Duration)) *schedule {
	return &schedule{
		exp: backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(initial),
			backoff.WithMaxInterval(maxInterval),
			backoff.WithMaxElapsedTime(maxElapsed),
		),
		maxElapsed: maxElapsed,
		chosen:     chosen,
	}
}

// Reset implements backoff.BackOff.
func (s *schedule) Reset() {
	s.exp.Reset()
	s.floor = 0
}

// timerGuard is kept free before maxElapsed: a timer fires a little after
// the delay asked for, and no attempt may start after the bound.
const timerGuard = 25 * time.Millisecond

// NextBackOff implements backoff.BackOff.
func (s *schedule) NextBackOff() time.Duration {
	next := s.exp.NextBackOff()
	if next != backoff.Stop && next < s.floor {
		next = s.floor
	}
	if next != backoff.Stop && s.exp.GetElapsedTime()+next+timerGuard > s.maxElapsed {
		next = backoff.Stop
	}
	s.floor = 0
	s.chosen(next)
	return next
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP date
// (RFC 9110 §10.2.3). It returns zero when the header is absent, malformed
// or in the past.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(365*24*time.Hour/time.Second) {
			secs = int64(365 * 24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
