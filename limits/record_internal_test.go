package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// Admit asks only after the slots taken before it are written, but no
// longer than its context allows: a Redis that does not answer fails the
// ask at the caller's bound (and the dispatcher then admits unchecked),
// not at the batch's own timeout.
func TestAdmitHeedsItsContextWhileWritingTakes(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	e := NewEnforcer(rdb, "test:")
	lapse := time.Now().Add(time.Minute)
	if _, ok := e.Take("t", "k", "taken", lapse, nil); !ok {
		t.Fatal("Take refused with an empty queue")
	}
	// The server stops answering every client for 3 s.
	if err := r.Client(t).Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Admit(ctx, "t", "k", "asked", lapse, Limit{MaxInFlight: 10}, 0)
	if took := time.Since(start); err == nil || took >= 3*time.Second {
		t.Errorf("Admit under a 200 ms context against a paused Redis = %v after %s; want its context's error before the pause ends", err, took)
	}
	e.Wait()
}

// TestIdleLeasesAreForgotten: a dispatcher keeps a rate lease per tool ×
// key × rate it charged; one unasked for leaseIdle is forgotten by the
// next sweep (a minute later), so serving many keys in turn does not grow
// the map for ever. A lease forgotten while a call held on to it is
// marked so, and that call asks the map again; a key whose lease was
// forgotten is charged as before. (Its idleness is made, not waited for.)
func TestIdleLeasesAreForgotten(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	e := NewEnforcer(r.Client(t), "test:")
	rate := PerSecond(1000).WithBurst(100) // leases of up to 20 tokens
	leases := func() (n int) {
		e.leases.Range(func(any, any) bool { n++; return true })
		return n
	}
	charge := func(key string) {
		t.Helper()
		d, err := e.Charge(t.Context(), "t", key, rate)
		if err != nil || !d.Allowed {
			t.Fatalf("Charge(%s) = %+v, %v; want allowed", key, d, err)
		}
	}
	for i := range 50 {
		charge(fmt.Sprint("k", i))
	}
	if n := leases(); n != 50 {
		t.Fatalf("%d leases after 50 keys; want 50", n)
	}
	first := e.leaseOf(leaseKey{"t", "k0", rate})
	long := time.Now().Add(-2 * leaseIdle)
	e.leases.Range(func(_, v any) bool {
		l := v.(*rateLease)
		l.mu.Lock()
		l.used = long
		l.mu.Unlock()
		return true
	})
	charge("k-new") // no sweep yet: the last was at the first charge
	if n := leases(); n != 51 {
		t.Fatalf("%d leases before a sweep is due; want 51", n)
	}
	e.swept.Store(long.UnixNano())
	charge("k-newer")
	if n := leases(); n != 2 {
		t.Fatalf("%d leases after the sweep; want the two asked within a minute", n)
	}
	first.mu.Lock()
	gone := first.gone
	first.mu.Unlock()
	if !gone {
		t.Error("a forgotten lease is not marked gone: a call holding it would go on using it")
	}
	charge("k0")
	if n := leases(); n != 3 {
		t.Errorf("%d leases after k0 was charged again; want 3", n)
	}
}
