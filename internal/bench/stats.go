package bench

import (
	"math"
	"slices"
	"time"
)

// Stats summarises the calls of one path in one scenario.
type Stats struct {
	// Calls that were measured, and how many of them failed.
	Calls  int `json:"calls"`
	Errors int `json:"errors"`
	// PerSec is the calls finished per second of the measured run.
	PerSec float64 `json:"calls_per_sec"`
	// Latency percentiles, in microseconds (open loop: from the intended
	// send time).
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p99_9_us"`
	// FirstError is the text of the first failure, if any.
	FirstError string `json:"first_error,omitempty"`
}

// summarize sorts lat in place and computes the statistics of a run that
// took elapsed.
func summarize(lat []time.Duration, errors int, firstErr error, elapsed time.Duration) Stats {
	slices.Sort(lat)
	s := Stats{Calls: len(lat), Errors: errors}
	if firstErr != nil {
		s.FirstError = firstErr.Error()
	}
	if elapsed > 0 {
		s.PerSec = float64(len(lat)) / elapsed.Seconds()
	}
	s.P50, s.P90, s.P99, s.P999 = pct(lat, 0.50), pct(lat, 0.90), pct(lat, 0.99), pct(lat, 0.999)
	return s
}

// pct is the nearest-rank percentile of sorted samples, in microseconds.
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Microsecond)
}

// Ratios compare the fleet with a baseline of the same scenario and run:
// throughput above 1 and latencies below 1 mean the fleet did better.
type Ratios struct {
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
}

// ratios of fleet to base; a ratio with a zero denominator is 0.
func ratios(fleet, base Stats) Ratios {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return Ratios{Throughput: div(fleet.PerSec, base.PerSec), P50: div(fleet.P50, base.P50), P99: div(fleet.P99, base.P99)}
}
