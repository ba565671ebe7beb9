package windlass

import (
	"context"
	"math"
	"unicode/utf8"
)

// MaxProgressMessage bounds a progress message, in bytes; a longer one is
// cut at a character boundary.
const MaxProgressMessage = 1024

// Progress is how far a long-running call has come.
type Progress struct {
	// Fraction done, from 0 to 1.
	Fraction float64 `json:"fraction"`
	// Message says what the tool is doing, for a person watching.
	Message string `json:"message,omitempty"`
}

type progressKey struct{}

// ContextWithProgress returns a context whose [ReportProgress] calls go to
// report. A fleet worker installs one that hands the latest report to the
// call's heartbeat; use it to observe a tool's progress in a test.
func ContextWithProgress(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// ReportProgress tells whoever runs the call how far the tool has come.
// fraction is clamped to [0, 1] (NaN counts as 0) and message to
// [MaxProgressMessage] bytes. It never blocks and costs nothing when nobody
// listens; in the fleet only the latest report before each heartbeat
// reaches the caller, so call it as often as is convenient.
func ReportProgress(ctx context.Context, fraction float64, message string) {
	report, ok := ctx.Value(progressKey{}).(func(Progress))
	if !ok {
		return
	}
	switch {
	case math.IsNaN(fraction) || fraction < 0:
		fraction = 0
	case fraction > 1:
		fraction = 1
	}
	if len(message) > MaxProgressMessage {
		cut := MaxProgressMessage
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut]
	}
	report(Progress{Fraction: fraction, Message: message})
}
