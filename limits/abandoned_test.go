package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
)

// TestAnAbandonedAdmissionHoldsNoSlot: a caller whose context ends while
// its admission is asked (an HTTP client gone, the dispatcher's bound on
// an ask) is told it failed, and holds no slot to free — so none may stay
// taken in Redis: neither when its context ended before the ask went out
// (it is not sent), nor while the ask was on its way (Redis paused; what
// the script took is freed once it ran). Before, the ask was sent anyway
// and took a slot nobody freed, held until the call's deadline and a
// minute: a few abandoned requests filled a key's cap. (Found by a review
// helper.)
func TestAnAbandonedAdmissionHoldsNoSlot(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	c := r.Client(t)
	e := limits.NewEnforcer(c, "test:")
	one := limits.Limit{MaxInFlight: 1}
	// A first call loads the script, as in every running fleet.
	d0, err := e.Admit(context.Background(), "t", "k", "c0", time.Now().Add(time.Hour), one, limits.NoLimit)
	if err != nil || !d0.Allowed {
		t.Fatal(d0, err)
	}
	e.Free(d0.Slot)
	e.Wait()
	set := "test:limits:{t}:in_flight:k"
	empty := func() bool { n, err := c.ZCard(context.Background(), set).Result(); return err == nil && n == 0 }
	fleettest.WaitFor(t, 5*time.Second, "the first slot freed", empty)

	t.Run("canceled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if dec, err := e.Admit(ctx, "t", "k", "c1", time.Now().Add(time.Hour), one, limits.NoLimit); err == nil {
			t.Fatalf("Admit on a canceled context = %+v, nil", dec)
		}
	})
	t.Run("canceled on its way", func(t *testing.T) {
		if err := c.Do(context.Background(), "CLIENT", "PAUSE", 500, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if dec, err := e.Admit(ctx, "t", "k", "c2", time.Now().Add(time.Hour), one, limits.NoLimit); err == nil {
			t.Fatalf("Admit while Redis is paused past the context = %+v, nil", dec)
		}
	})
	// A write sent after the script returns once the pause is over and
	// the script (paused first) has run; then what it took is freed.
	if err := c.Set(context.Background(), "test:probe", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "no slot held for an abandoned admission", empty)
	e.Wait()
	d3, err := e.Admit(context.Background(), "t", "k", "c3", time.Now().Add(time.Hour), one, limits.NoLimit)
	if err != nil || !d3.Allowed {
		t.Errorf("the key's next call = %+v, %v; want admitted: its cap of one is free", d3, err)
	}
	e.Free(d3.Slot)
	e.Wait()
}
