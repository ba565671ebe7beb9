package limits

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestAChargeThroughASweptLeaseAsksTheMapAgain: a call that looked up its
// key's lease, which a sweep then forgot before the call used it, asks
// the map again and is charged through the lease the map holds now: the
// tokens it takes from Redis are handed out from there, to the key's
// next calls, not stranded in a lease nobody looks up any more (a rate
// that admits fewer calls than it charged Redis for).
//
// The interleaving is made, not waited for: the test holds the lease's
// lock while the call looks it up, and forgets the lease as sweepLeases
// does (under that lock) once the call waits for it.
func TestAChargeThroughASweptLeaseAsksTheMapAgain(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	e := NewEnforcer(r.Client(t), "test:")
	rate := PerSecond(1000).WithBurst(100) // leases of up to 20 tokens
	k := leaseKey{"t", "k", rate}

	// A lease a minute idle, whose last window was busy: charged again,
	// it would take a full lease from Redis.
	old := e.leaseOf(k)
	old.mu.Lock()
	old.used, old.demand = time.Now().Add(-2*leaseIdle), leaseSize(rate)
	type charged struct {
		d   Decision
		err error
	}
	done := make(chan charged, 1)
	go func() {
		d, err := e.charge(t.Context(), k, leaseSize(rate))
		done <- charged{d, err}
	}()
	if !waitsForLock("limits.(*Enforcer).charge(") { // it looked the lease up, and waits for it
		old.mu.Unlock()
		t.Fatal("the charge does not wait for the lease's lock within 10s")
	}
	// The sweep forgets it, between the call's look-up and its use.
	old.gone = true
	if !e.leases.CompareAndDelete(k, old) {
		old.mu.Unlock()
		t.Fatal("the lease looked up is not the map's")
	}
	old.mu.Unlock()

	var c charged
	select {
	case c = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the charge did not return within 10s")
	}
	if c.err != nil || !c.d.Allowed {
		t.Fatalf("charge = %+v, %v; want allowed", c.d, c.err)
	}
	v, ok := e.leases.Load(k)
	if !ok {
		t.Fatal("no lease in the map after the charge: it was charged through the forgotten one, which nobody asks again")
	}
	now := v.(*rateLease)
	if now == old {
		t.Fatal("the forgotten lease is back in the map")
	}
	now.mu.Lock()
	served, used := now.served, now.used
	now.mu.Unlock()
	if served != 1 || time.Since(used) >= leaseIdle {
		t.Errorf("the map's lease served %d calls, last asked %s ago; want the charge (1) just now", served, time.Since(used).Round(time.Millisecond))
	}
	old.mu.Lock()
	left, oldServed := old.left, old.served
	old.mu.Unlock()
	if left != 0 || oldServed != 0 {
		t.Errorf("the forgotten lease holds %d tokens and served %d calls; want none: tokens charged in Redis are stranded there", left, oldServed)
	}
}

// waitsForLock waits until a goroutine whose stack holds fn waits for a
// sync.Mutex, up to 10s; false if none did.
func waitsForLock(fn string) bool {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			header, _, _ := strings.Cut(g, "\n")
			if strings.Contains(header, "[sync.Mutex.Lock") && strings.Contains(g, fn) {
				return true
			}
		}
	}
	return false
}
