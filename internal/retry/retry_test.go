package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/internal/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFlaky = errors.New("flaky")

// failing returns an operation that fails n times, then succeeds, and a
// count of its calls.
func failing(n int) (func(context.Context) error, *int) {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls <= n {
			return fmt.Errorf("attempt %d: %w", calls, errFlaky)
		}
		return nil
	}, &calls
}

func TestDo(t *testing.T) {
	fast := retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	for _, tc := range []struct {
		name      string
		policy    retry.Policy
		failures  int
		wantCalls int
		wantErr   bool
	}{
		{"first attempt succeeds", fast, 0, 1, false},
		{"succeeds after failures", fast, 3, 4, false},
		{"attempts bound the calls", retry.Policy{Initial: time.Millisecond, Attempts: 3}, 10, 3, true},
		{"one attempt means no retry", retry.Policy{Initial: time.Millisecond, Attempts: 1}, 10, 1, true},
		{"no wait when Initial is zero", retry.Policy{Attempts: 3}, 2, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, calls := failing(tc.failures)
			err := retry.Do(t.Context(), tc.policy, op)
			if (err != nil) != tc.wantErr || *calls != tc.wantCalls {
				t.Fatalf("Do = %v after %d calls; want error %v after %d", err, *calls, tc.wantErr, tc.wantCalls)
			}
			if err != nil && !errors.Is(err, errFlaky) {
				t.Errorf("Do returned %v, not the operation's last error", err)
			}
		})
	}
}

func TestDoPermanentStopsAtOnce(t *testing.T) {
	calls := 0
	err := retry.Do(t.Context(), retry.Policy{Initial: time.Millisecond}, func(context.Context) error {
		calls++
		if calls == 2 {
			return retry.Permanent(errFlaky)
		}
		return errors.New("transient")
	})
	if calls != 2 || err != errFlaky { //nolint:errorlint // the very error, unwrapped from Permanent
		t.Fatalf("Do = %v after %d calls; want errFlaky itself after 2", err, calls)
	}
}

func TestDoStopsWhenForIsSpent(t *testing.T) {
	op, calls := failing(1 << 30)
	start := time.Now()
	err := retry.Do(t.Context(), retry.Policy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, For: 100 * time.Millisecond}, op)
	if err == nil || *calls < 2 {
		t.Fatalf("Do = %v after %d calls; want the last error after several", err, *calls)
	}
	// No attempt starts past For: the last one started within it.
	if took := time.Since(start); took > 100*time.Millisecond+5*time.Second {
		t.Errorf("Do ran %s, far past its 100ms", took)
	}
}

func TestDoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := retry.Do(ctx, retry.Policy{Initial: time.Hour}, func(context.Context) error {
		calls++
		cancel() // the wait that follows ends with ctx
		return errFlaky
	})
	if calls != 1 || !errors.Is(err, errFlaky) {
		t.Fatalf("Do = %v after %d calls; want the operation's error after 1", err, calls)
	}
}

func TestPerAttemptBoundsEachAttempt(t *testing.T) {
	calls := 0
	err := retry.Do(t.Context(), retry.Policy{Attempts: 2, PerAttempt: 20 * time.Millisecond}, func(ctx context.Context) error {
		calls++
		<-ctx.Done() // an attempt whose reply never comes
		return ctx.Err()
	})
	if calls != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v after %d calls; want DeadlineExceeded after 2", err, calls)
	}
}

func TestValue(t *testing.T) {
	calls := 0
	v, err := retry.Value(t.Context(), retry.Policy{Attempts: 3}, func(context.Context) (int, error) {
		calls++
		if calls < 2 {
			return 0, errFlaky
		}
		return 42, nil
	})
	if v != 42 || err != nil {
		t.Fatalf("Value = %d, %v; want 42, nil", v, err)
	}
}

func TestDelayDoublesWithinJitterAndCap(t *testing.T) {
	p := retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 50 {
			got := p.Delay(n)
			// ±20% jitter around the doubled wait (backoff/v4 applies it to
			// the capped interval, so a capped wait may exceed Max by 20%).
			if lo, hi := want*8/10, want*12/10; got < lo || got > hi {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", n, got, lo, hi)
			}
		}
	}
}

func TestWaitsReset(t *testing.T) {
	w := retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second}.Waits()
	for range 5 {
		w.Next()
	}
	if got := w.Next(); got < time.Second {
		t.Fatalf("sixth wait %s, want grown past 1s", got)
	}
	w.Reset()
	if got := w.Next(); got > 120*time.Millisecond {
		t.Fatalf("wait after Reset %s, want about Initial", got)
	}
}

func TestSleep(t *testing.T) {
	if !retry.Sleep(t.Context(), time.Millisecond) {
		t.Error("Sleep with a live context = false")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if retry.Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended context = true")
	}
}
