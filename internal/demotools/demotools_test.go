package demotools_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/demotools"
)

// TestSleepReportsProgress: the demo sleep tool reports how far it has come
// while it sleeps, so that a caller sees progress.
func TestSleepReportsProgress(t *testing.T) {
	var mu sync.Mutex
	var reports []windlass.Progress
	ctx := windlass.ContextWithProgress(context.Background(), func(p windlass.Progress) {
		mu.Lock()
		reports = append(reports, p)
		mu.Unlock()
	})
	r := windlass.Invoke(ctx, demotools.Sleep(), windlass.ToolCall{ID: "s", Name: "sleep", Arguments: []byte(`{"seconds":0.5}`)})
	if r.IsError || !strings.HasPrefix(r.Content, "slept") {
		t.Fatalf("sleep = %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 {
		t.Fatal("no progress reported while sleeping 0.5 s")
	}
	for _, p := range reports {
		if p.Fraction <= 0 || p.Fraction > 1 || !strings.Contains(p.Message, " of ") {
			t.Errorf("progress %+v; want a fraction in (0, 1] and a message saying how much of the sleep is done", p)
		}
	}
}

// TestRefundIsGatedOverAHundred: refund's condition holds for a refund
// over 100 only.
func TestRefundIsGatedOverAHundred(t *testing.T) {
	s := demotools.Refund().Spec()
	for args, want := range map[string]bool{`{"order":"o1","amount":100}`: false, `{"order":"o1","amount":100.5}`: true, `{"order":"o1","amount":3}`: false} {
		if got, err := s.NeedsApproval([]byte(args)); got != want || err != nil {
			t.Errorf("NeedsApproval(%s) = %v, %v; want %v", args, got, err, want)
		}
	}
}
