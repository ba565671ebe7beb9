package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// CallFunc makes one call and waits for its answer; an error is a failed
// call. It must be safe for concurrent use.
type CallFunc func(ctx context.Context) error

// Load is how calls are offered to a path.
type Load struct {
	// InFlight is the number of callers of a closed loop, each making its
	// next call as soon as its last one is answered. Ignored when Rate is
	// set.
	InFlight int
	// Rate makes an open loop: calls are started at this many a second,
	// whether or not earlier ones were answered, and each call's latency
	// runs from the time it was meant to start.
	Rate float64
	// Calls is how many calls to measure. Zero: as many as Duration allows
	// (closed loop), or Rate × Duration (open loop).
	Calls int
	// Duration bounds a run when Calls is zero.
	Duration time.Duration
}

// maxOutstanding bounds the calls an open loop has started and not yet seen
// answered; past it the schedule waits, and the wait shows in the
// latencies, which run from the intended start.
const maxOutstanding = 50_000

// Measure offers call to a path under load and summarises the answers.
// done, when not nil, counts answered calls as they come, for a progress
// line. A run ends early when ctx ends; what was measured until then is
// summarised.
func Measure(ctx context.Context, load Load, call CallFunc, done *atomic.Int64) Stats {
	if done == nil {
		done = new(atomic.Int64)
	}
	if load.Rate > 0 {
		return openLoop(ctx, load, call, done)
	}
	return closedLoop(ctx, load, call, done)
}

// failures records failed calls.
type failures struct {
	mu    sync.Mutex
	n     int
	first error
}

func (f *failures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.first == nil {
		f.first = err
	}
}

func closedLoop(ctx context.Context, load Load, call CallFunc, done *atomic.Int64) Stats {
	r := closedRun(ctx, load, call, done)
	return summarize(r.lat, r.errors, r.firstErr, r.elapsed)
}

// run is what a closed loop measured, before it is summarised.
type run struct {
	lat      []time.Duration
	errors   int
	firstErr error
	elapsed  time.Duration
}

func closedRun(ctx context.Context, load Load, call CallFunc, done *atomic.Int64) *run {
	if done == nil {
		done = new(atomic.Int64)
	}
	inflight := max(load.InFlight, 1)
	var (
		next   atomic.Int64
		fail   failures
		mu     sync.Mutex
		all    []time.Duration
		wg     sync.WaitGroup
		start  = time.Now()
		stopAt = start.Add(load.Duration)
	)
	more := func() bool {
		if ctx.Err() != nil {
			return false
		}
		if load.Calls > 0 {
			return next.Add(1) <= int64(load.Calls)
		}
		return time.Now().Before(stopAt)
	}
	for range inflight {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1024)
			for more() {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					fail.add(err)
				}
				lat = append(lat, time.Since(t0))
				done.Add(1)
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return &run{lat: all, errors: fail.n, firstErr: fail.first, elapsed: time.Since(start)}
}

// MeasureInterleaved measures paths under the closed loop load
// (load.Rate is ignored) in rounds, each path making its share of
// load.Calls in each: the paths in order, then in reverse order, and so
// on, so that the machine's drifts during the run (neighbours' load, a
// server's growing state) fall on every path alike. The rounds are an
// even number, at least 2, as many as leave each path at least 8 ×
// load.InFlight calls a round (a closed loop's start and end are
// ramps), at most 10. Each path's Stats are over all its rounds: its
// calls per second of its own measured time, its percentiles over all
// its calls.
func MeasureInterleaved(ctx context.Context, load Load, paths []CallFunc) []Stats {
	rounds := min(max(load.Calls/(8*max(load.InFlight, 1)), 2), 10) &^ 1
	runs := make([]run, len(paths))
	for round := range rounds {
		part := load
		part.Calls = load.Calls*(round+1)/rounds - load.Calls*round/rounds
		if part.Calls == 0 {
			continue
		}
		for j := range paths {
			i := j
			if round%2 == 1 {
				i = len(paths) - 1 - j
			}
			r := closedRun(ctx, part, paths[i], nil)
			runs[i].lat = append(runs[i].lat, r.lat...)
			runs[i].elapsed += r.elapsed
			runs[i].errors += r.errors
			if runs[i].firstErr == nil {
				runs[i].firstErr = r.firstErr
			}
		}
	}
	stats := make([]Stats, len(paths))
	for i, r := range runs {
		stats[i] = summarize(r.lat, r.errors, r.firstErr, r.elapsed)
	}
	return stats
}

func openLoop(ctx context.Context, load Load, call CallFunc, done *atomic.Int64) Stats {
	n := load.Calls
	if n <= 0 {
		n = max(int(load.Rate*load.Duration.Seconds()), 1)
	}
	interval := time.Duration(float64(time.Second) / load.Rate)
	lat := make([]time.Duration, n)
	var (
		fail  failures
		wg    sync.WaitGroup
		slots = make(chan struct{}, maxOutstanding)
		start = time.Now()
		sent  int
	)
schedule:
	for i := range n {
		intended := start.Add(time.Duration(i) * interval)
		if d := time.Until(intended); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				break schedule
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break schedule
		}
		sent++
		wg.Go(func() {
			defer func() { <-slots }()
			if err := call(ctx); err != nil {
				fail.add(err)
			}
			lat[i] = time.Since(intended)
			done.Add(1)
		})
	}
	wg.Wait()
	return summarize(lat[:sent], fail.n, fail.first, time.Since(start))
}
