package limits

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is how many events may start per period, with a burst: the most
// that may start at once after a quiet spell. The zero Rate is no rate.
type Rate struct {
	// Events per Per.
	Events int
	// Per is the period: a second, a minute or an hour.
	Per time.Duration
	// Burst is the most events that may start at once; 0 means Events.
	Burst int
}

// PerSecond is n events a second, with a burst of n.
func PerSecond(n int) Rate { return Rate{Events: n, Per: time.Second} }

// PerMinute is n events a minute, with a burst of n.
func PerMinute(n int) Rate { return Rate{Events: n, Per: time.Minute} }

// IsZero reports whether r is no rate.
func (r Rate) IsZero() bool { return r.Events == 0 }

// WithBurst returns r with a burst of n.
func (r Rate) WithBurst(n int) Rate { r.Burst = n; return r }

// burst is the burst in force: Burst, or Events when it is 0.
func (r Rate) burst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Events
}

// Interval is the time between two events at the rate (zero for no rate).
func (r Rate) Interval() time.Duration {
	if r.IsZero() {
		return 0
	}
	return r.Per / time.Duration(r.Events)
}

// String is the form ParseRate reads, "10/s", with " burst N" when the
// burst is not the rate's own.
func (r Rate) String() string {
	if r.IsZero() {
		return "none"
	}
	s := strconv.Itoa(r.Events) + "/" + unitOf[r.Per]
	if r.Burst > 0 && r.Burst != r.Events {
		s += " burst " + strconv.Itoa(r.Burst)
	}
	return s
}

var unitOf = map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}
var periodOf = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// MaxEvents bounds a rate's events and burst: more than a million calls
// per period is not a limit a fleet enforces per key.
const MaxEvents = 1_000_000

// ParseRate reads "N/s", "N/m" or "N/h" (N calls a second, minute or
// hour, 1 to MaxEvents), optionally followed by " burst B"; "none" (or "")
// is no rate.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return Rate{}, nil
	}
	rate, burst, hasBurst := strings.Cut(s, " burst ")
	n, unit, ok := strings.Cut(strings.TrimSpace(rate), "/")
	per, known := periodOf[unit]
	events, err := strconv.Atoi(n)
	if !ok || !known || err != nil || events < 1 || events > MaxEvents {
		return Rate{}, fmt.Errorf("%q: want N/s, N/m or N/h with N from 1 to %d (for example 10/s), optionally followed by \" burst B\", or none", s, MaxEvents)
	}
	r := Rate{Events: events, Per: per}
	if hasBurst {
		b, err := strconv.Atoi(strings.TrimSpace(burst))
		if err != nil || b < 1 || b > MaxEvents {
			return Rate{}, fmt.Errorf("%q: the burst must be a whole number from 1 to %d", s, MaxEvents)
		}
		r.Burst = b
	}
	return r, nil
}

// validate checks a Rate built in Go rather than parsed.
func (r Rate) validate() error {
	switch {
	case r.IsZero():
		if r.Burst != 0 || r.Per != 0 {
			return fmt.Errorf("a burst or period without events: set Events, or leave the rate zero for none")
		}
	case r.Events < 0 || r.Events > MaxEvents:
		return fmt.Errorf("events must be from 1 to %d, got %d", MaxEvents, r.Events)
	case unitOf[r.Per] == "":
		return fmt.Errorf("the period must be a second, a minute or an hour, got %s", r.Per)
	case r.Burst < 0 || r.Burst > MaxEvents:
		return fmt.Errorf("the burst must be from 0 (the rate's events) to %d, got %d", MaxEvents, r.Burst)
	}
	return nil
}

// Validate reports whether r is a rate the fleet can enforce: zero, or
// 1 to MaxEvents events a second, minute or hour with a burst up to
// MaxEvents.
func (r Rate) Validate() error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("limits: rate %s: %w", r, err)
	}
	return nil
}
