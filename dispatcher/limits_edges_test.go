package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/worker"
)

// TestTheSameIDTwiceOverItsRateIsRefusedTwice: a key whose rate is
// spent (1/m, burst 1, the token used) submits a call with its own id
// twice at once (a client that retries while its first request is still
// under way). One submit takes the id's slot, is refused rate_limited
// ("The call was not queued") and frees the slot; the other found the
// slot "held" (a resubmit), was admitted without a charge and queued the
// call, which runs. So the rate is passed, and the caller is told "not
// queued" for a call that was queued and ran.
func TestTheSameIDTwiceOverItsRateIsRefusedTwice(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	echo := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	f.StartWorker(worker.Config{}, echo)
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Default: limits.Limit{Rate: limits.PerMinute(1).WithBurst(1)}}})
	fleettest.WaitCatalog(t, d, "echo")

	// The key's one token.
	if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("acme")); err != nil {
		t.Fatalf("first call: %v", err)
	}
	start := time.Now()
	for round := range 10 {
		id := fmt.Sprintf("dup-%d", round)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				_, errs[i] = d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"), dispatcher.WithCallID(id))
			})
		}
		wg.Wait()
		if errs[0] != nil && errs[1] != nil {
			continue // both refused: as it should be
		}
		r, err := d.Wait(t.Context(), id)
		t.Fatalf("round %d, %s after the key's only token of the minute was spent: submit A = %v; submit B = %v; "+
			"the call %q then ran: result %q, %v. Want both refused rate_limited (the key is over its rate of 1/m)",
			round, time.Since(start).Round(time.Millisecond), errs[0], errs[1], id, r.Content, err)
	}
}

// TestACanceledSubmitHoldsNoSlot: a caller whose context ends while its
// call is admitted (a client that disconnects, an HTTP request canceled)
// is told the call was not accepted, nothing is queued, and no slot stays
// taken: as many such calls as the key's cap leave its next real call
// admitted. Before, the admission's script was sent anyway and took a slot
// nobody freed until it lapsed (the call's deadline and a minute): the
// next call was refused rate_limited with nothing in flight. (Found by a
// review helper.)
func TestACanceledSubmitHoldsNoSlot(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	echo := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	f.StartWorker(worker.Config{}, echo)
	const capacity = 3
	d := f.Dispatcher(dispatcher.Config{Limits: limits.Config{Default: limits.Limit{MaxInFlight: capacity}}})
	fleettest.WaitCatalog(t, d, "echo")
	peek := f.RedisClient()
	keySet := "windlass:limits:{echo}:in_flight:acme"
	// Another key's call: the admission script is loaded, as in any
	// fleet that has admitted a call.
	if _, err := d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("warm")); err != nil {
		t.Fatal(err)
	}

	for i := range capacity {
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // the client is gone
		id, err := d.Submit(ctx, "echo", `{}`, dispatcher.WithKey("acme"), dispatcher.WithTimeout(10*time.Minute))
		if err == nil {
			t.Fatalf("submit %d on a canceled context accepted %s", i, id)
		}
		t.Logf("submit %d on a canceled context: id %q, %v", i, id, err)
	}
	st, err := d.Fleet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	queued := 0
	for _, tl := range st.Tools {
		queued += int(tl.Queued) + int(tl.InFlight)
	}
	_, err = d.Submit(t.Context(), "echo", `{}`, dispatcher.WithKey("acme"))
	members, _ := peek.ZRangeWithScores(t.Context(), keySet, 0, -1).Result()
	var lapses []string
	for _, m := range members {
		lapses = append(lapses, fmt.Sprintf("%v until %s", m.Member, time.Until(time.UnixMilli(int64(m.Score))).Round(time.Second)))
	}
	if err != nil {
		t.Fatalf("key acme's first real call = %v, with no call of it queued or running (fleet: %d queued/in flight); %s holds %v", err, queued, keySet, lapses)
	}
}
