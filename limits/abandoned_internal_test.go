package limits

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// slowScript keeps Redis busy for ARGV[1] ms: a batch holding it is on
// its way for that long.
const slowScript = `
local t = redis.call('TIME')
local start = t[1] * 1000 + math.floor(t[2] / 1000)
while true do
  t = redis.call('TIME')
  if t[1] * 1000 + math.floor(t[2] / 1000) - start >= tonumber(ARGV[1]) then return 1 end
end`

// waitUntil polls ok until it holds, or fails t after d (fleettest's
// WaitFor, which an internal test of package limits cannot import).
func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// TestAnAbandonedAdmissionDoesNotFreeItsRetrysSlot: a caller whose
// admission of call X is on its way to Redis leaves (its client timed
// out), and its retry — the same id, the same call — is asked in the same
// round trip, and finds X's slot held by the abandoned ask's script. The
// retry is not admitted on that (Held: the dispatcher waits for X's record
// and, finding none, asks again); asked again, once the abandoned ask's
// undo freed the slot, X takes it, and the key's cap of one refuses
// another call beside it. Before, the retry was admitted as a resubmit,
// without a slot, and the undo then freed the slot X ran on: another call
// was admitted beside it. (Found by a review helper.)
func TestAnAbandonedAdmissionDoesNotFreeItsRetrysSlot(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	c := r.Client(t)
	e := NewEnforcer(c, "test:")
	one := Limit{MaxInFlight: 1}
	bg := context.Background()
	d0, err := e.Admit(bg, "t", "k", "c0", time.Now().Add(time.Hour), one, NoLimit)
	if err != nil || !d0.Allowed {
		t.Fatal(d0, err)
	}
	e.Free(d0.Slot)
	e.Wait()

	raw := func(ms int) *batched {
		b := &batched{build: func(p redis.Pipeliner) redis.Cmder { return p.Eval(bg, slowScript, nil, ms) }, done: make(chan struct{})}
		e.batch.enqueue(b)
		return b
	}
	queued := func() int {
		e.batch.pending.mu.Lock()
		defer e.batch.pending.mu.Unlock()
		return len(e.batch.pending.queue)
	}

	// A batch on its way, so that the two asks below share the next one.
	first := raw(300)
	waitUntil(t, 5*time.Second, "the first batch sent", func() bool { return first.state.Load() == batchSending })

	type admitted struct {
		d   Decision
		err error
	}
	ctxA, leave := context.WithCancel(bg)
	defer leave()
	aDone, bDone := make(chan admitted, 1), make(chan admitted, 1)
	go func() {
		d, err := e.Admit(ctxA, "t", "k", "X", time.Now().Add(time.Hour), one, NoLimit)
		aDone <- admitted{d, err}
	}()
	waitUntil(t, 5*time.Second, "the first ask queued", func() bool { return queued() == 1 })
	go func() {
		d, err := e.Admit(bg, "t", "k", "X", time.Now().Add(time.Hour), one, NoLimit)
		bDone <- admitted{d, err}
	}()
	waitUntil(t, 5*time.Second, "the retry queued", func() bool { return queued() == 2 })
	// A slow command behind them keeps their batch on its way.
	last := raw(300)
	waitUntil(t, 5*time.Second, "the asks sent", func() bool { return last.state.Load() == batchSending })
	leave() // the first caller's client is gone

	a := <-aDone
	if a.err == nil {
		t.Fatalf("the abandoned ask = %+v, nil; want its context's error", a.d)
	}
	b := <-bDone
	if b.err != nil || !b.d.Held || b.d.Allowed || b.d.Slot != nil {
		t.Fatalf("the retry = %+v, %v; want held, neither allowed nor refused", b.d, b.err)
	}
	e.Wait()
	// Asked again (no record of X: the dispatcher's case), X takes its slot.
	again, err := e.Admit(bg, "t", "k", "X", time.Now().Add(time.Hour), one, NoLimit)
	if err != nil || !again.Allowed || again.Slot == nil {
		t.Fatalf("the retry asked again = %+v, %v; want admitted with a slot", again, err)
	}
	if n, err := c.ZCard(bg, e.keySlots("t", "k")).Result(); err != nil || n != 1 {
		t.Errorf("slots held under the key after the retry of X was admitted = %d, %v; want 1 (X's)", n, err)
	}
	d, err := e.Admit(bg, "t", "k", "other", time.Now().Add(time.Hour), one, NoLimit)
	if err != nil || d.Allowed {
		t.Errorf("another call under a cap of one while X runs = %+v, %v; want refused (in_flight)", d, err)
	}
}
