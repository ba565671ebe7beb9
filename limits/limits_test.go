package limits_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want limits.Rate
		err  string
	}{
		{in: "10/s", want: limits.PerSecond(10)},
		{in: "600/m", want: limits.PerMinute(600)},
		{in: "5/h burst 2", want: limits.Rate{Events: 5, Per: time.Hour, Burst: 2}},
		{in: "none"},
		{in: ""},
		{in: "10", err: "want N/s, N/m or N/h"},
		{in: "10/x", err: "want N/s, N/m or N/h"},
		{in: "0/s", err: "N from 1"},
		{in: "-3/s", err: "N from 1"},
		{in: "10/s burst 0", err: "burst must be a whole number"},
		{in: "10/s burst lots", err: "burst must be a whole number"},
	} {
		got, err := limits.ParseRate(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseRate(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if err == nil && !got.IsZero() {
			if back, err := limits.ParseRate(got.String()); err != nil || back.Events != got.Events || back.Per != got.Per {
				t.Errorf("ParseRate(%q).String() = %q does not read back: %v, %v", tc.in, got, back, err)
			}
		}
	}
}

// TestForPicksTheMostSpecificEntry: each field of a key's limit for a
// tool comes from the most specific entry that sets it.
func TestForPicksTheMostSpecificEntry(t *testing.T) {
	c, err := limits.Parse([]byte(`
default: {rate: 50/s, max_in_flight: 100}
keys:
  batch: {max_in_flight: 5000}
tools:
  pay:
    max_queued: 20
    default: {rate: 1/s}
    keys:
      acme: {rate: 10/s, burst: 20}
max_queued: 300
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool, key string
		want      limits.Limit
	}{
		{"other", "anyone", limits.Limit{Rate: limits.PerSecond(50), MaxInFlight: 100}},
		{"other", "batch", limits.Limit{Rate: limits.PerSecond(50), MaxInFlight: 5000}},
		{"pay", "anyone", limits.Limit{Rate: limits.PerSecond(1), MaxInFlight: 100}},
		{"pay", "batch", limits.Limit{Rate: limits.PerSecond(1), MaxInFlight: 5000}},
		{"pay", "acme", limits.Limit{Rate: limits.PerSecond(10).WithBurst(20), MaxInFlight: 100}},
	} {
		if got := c.For(tc.tool, tc.key); got != tc.want {
			t.Errorf("For(%q, %q) = %+v, want %+v", tc.tool, tc.key, got, tc.want)
		}
	}
	if got := c.ToolMaxQueued("pay"); got != 20 {
		t.Errorf("ToolMaxQueued(pay) = %d, want 20", got)
	}
	if got := c.ToolMaxQueued("other"); got != 300 {
		t.Errorf("ToolMaxQueued(other) = %d, want 300", got)
	}
	var zero limits.Config
	if got := zero.For("t", "k"); got.MaxInFlight != limits.DefaultMaxInFlight || !got.Rate.IsZero() {
		t.Errorf("the zero Config's limit = %+v, want the default cap and no rate", got)
	}
	if zero.ToolMaxQueued("t") != limits.DefaultMaxQueued || zero.StreamMaxQueued() != limits.DefaultMaxQueuedCalls {
		t.Error("the zero Config does not have the default caps")
	}
	if u := limits.Unlimited(); u.For("t", "k").MaxInFlight != limits.NoLimit || u.ToolMaxQueued("t") != limits.NoLimit || u.StreamMaxQueued() != limits.NoLimit {
		t.Error("Unlimited has a limit")
	}
}

// TestBadFilesNameTheEntryAndTheRule: a limits file with a mistake is
// refused with the entry's path and the rule it breaks.
func TestBadFilesNameTheEntryAndTheRule(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`default: {rate: 10/x}`, "default.rate"},
		{`tools: {pay: {keys: {acme: {max_in_flight: -5}}}}`, "tools.pay.keys.acme.max_in_flight: must be a positive number"},
		{`tools: {"bad name": {max_queued: 3}}`, `tools["bad name"]`},
		{`keys: {"a b": {max_in_flight: 3}}`, `keys["a b"]`},
		{`keys: {acme: {burst: 3}}`, "keys.acme.burst: a burst needs a rate"},
		{`max_queued_calls: -2`, "max_queued_calls: must be a positive number"},
		{`default: {rat: 10/s}`, "field rat not found"},
	} {
		_, err := limits.Parse([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", tc.file, err, tc.want)
		}
	}
}

// TestSlotLapsesWithoutRelease: a slot nobody releases (its dispatcher
// died) lapses at the time it was given, and frees its place.
func TestSlotLapsesWithoutRelease(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	e := limits.NewEnforcer(r.Client(t), "test:")
	ctx := context.Background()
	l := limits.Limit{MaxInFlight: 1}
	dec, err := e.Admit(ctx, "t", "k", "c1", time.Now().Add(300*time.Millisecond), l, limits.NoLimit)
	if err != nil || !dec.Allowed || dec.Slot == nil {
		t.Fatalf("first call: %+v, %v", dec, err)
	}
	if dec, err := e.Admit(ctx, "t", "k", "c2", time.Now().Add(time.Minute), l, limits.NoLimit); err != nil || dec.Allowed || dec.Reason != limits.ReasonInFlight {
		t.Fatalf("second call under a cap of 1: %+v, %v; want refused in_flight", dec, err)
	}
	fleettest.WaitFor(t, 30*time.Second, "the first slot lapsed", func() bool {
		dec, err := e.Admit(ctx, "t", "k", "c2", time.Now().Add(time.Minute), l, limits.NoLimit)
		return err == nil && dec.Allowed
	})
	use, err := e.Use(ctx, "t")
	if err != nil || use["k"] != 1 {
		t.Errorf("Use = %v, %v; want k: 1", use, err)
	}
	e.Free(dec.Slot)
	e.Wait()
}

// TestTakeAndFreeInBatches: slots taken without asking are recorded, with
// the counts they found, and slots freed after them are gone, in the
// order they came, however they were batched.
func TestTakeAndFreeInBatches(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	e := limits.NewEnforcer(r.Client(t), "test:")
	ctx := context.Background()
	lapse := time.Now().Add(time.Minute)
	var slots []*limits.Slot
	found := make(chan limits.Taken, 300)
	for i := range 300 {
		key := []string{"a", "b", "c"}[i%3]
		slot, ok := e.Take("t", key, fmt.Sprintf("call-%d", i), lapse, func(t limits.Taken) { found <- t })
		if !ok {
			t.Fatal("Take refused with an empty queue")
		}
		slots = append(slots, slot)
		if i%2 == 0 {
			e.Free(slot) // freed right behind its take: never counted at the end
		}
	}
	e.Wait()
	close(found)
	most := 0
	for f := range found {
		if f.Err != nil {
			t.Fatal(f.Err)
		}
		most = max(most, f.ToolInFlight)
	}
	if most == 0 || most > 300 {
		t.Errorf("the largest tool count a take found = %d; want 1 to 300", most)
	}
	use, err := e.Use(ctx, "t")
	if err != nil || use["a"]+use["b"]+use["c"] != 150 {
		t.Fatalf("Use = %v, %v; want 150 slots held (the odd ones)", use, err)
	}
	for _, s := range slots {
		e.Free(s)
	}
	e.Wait()
	if use, err := e.Use(ctx, "t"); err != nil || len(use) != 0 {
		t.Errorf("Use after every slot was freed = %v, %v; want none", use, err)
	}
}

// A slot freed before its take was written costs Redis no write: the
// take waits recordHold for the free that undoes it (a fast call's round
// trip), and neither goes to Redis; the take still hands over the counts.
func TestTakeFreedWithinTheHoldIsNeverWritten(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	e := limits.NewEnforcer(rdb, "test:")
	ctx := context.Background()
	lapse := time.Now().Add(time.Minute)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const calls = 100
	found := make(chan limits.Taken, calls)
	for i := range calls {
		slot, ok := e.Take("t", "k", fmt.Sprintf("call-%d", i), lapse, func(t limits.Taken) { found <- t })
		if !ok {
			t.Fatal("Take refused with an empty queue")
		}
		e.Free(slot) // the call ended at once
	}
	e.Wait()
	close(found)
	n := 0
	for f := range found {
		n++
		if f.Err != nil {
			t.Fatalf("a take undone by its free was handed %v; want the counts", f.Err)
		}
	}
	if n != calls {
		t.Fatalf("%d takes handed their counts; want %d", n, calls)
	}
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Commands a script runs are counted too. A take freed at once may
	// still be written on a machine so loaded that the free comes a hold
	// later; most are not.
	if adds := commandCalls(stats, "zadd"); adds > calls/5 {
		t.Errorf("Redis ran ZADD %d times for %d slots freed right after their take; want (almost) none\n%s", adds, calls, stats)
	}
	if use, err := e.Use(ctx, "t"); err != nil || len(use) != 0 {
		t.Errorf("Use = %v, %v; want no slot held", use, err)
	}
}

// commandCalls is how many times INFO commandstats says cmd ran.
func commandCalls(stats, cmd string) int {
	for line := range strings.Lines(stats) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n := 0
		fmt.Sscanf(rest, "%d", &n)
		return n
	}
	return 0
}

// A high rate is charged in leases: many calls cost a few round trips to
// Redis, not one each; a key over its rate is refused mostly without
// asking; and two enforcers (two dispatchers) sharing a rate still admit
// no more than it allows between them.
func TestRateIsChargedInLeases(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := context.Background()
	enforcers := []*limits.Enforcer{limits.NewEnforcer(rdb, "test:"), limits.NewEnforcer(rdb, "test:")}
	// charge makes 8 callers, half on each enforcer, charge key 300 times
	// each under rate; it returns what was admitted and refused, how long
	// it took and how many scripts Redis ran.
	charge := func(key string, rate limits.Rate) (admitted, refused int64, elapsed time.Duration, asked int) {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var ok, no atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 8 {
			e := enforcers[i%2]
			wg.Go(func() {
				for range 300 {
					dec, err := e.Charge(ctx, "t", key, rate)
					switch {
					case err != nil:
						t.Error(err)
						return
					case dec.Allowed:
						ok.Add(1)
					case dec.Reason != limits.ReasonRate || dec.RetryAfter <= 0:
						t.Errorf("refusal %+v; want the rate's, with a retry-after", dec)
					default:
						no.Add(1)
					}
				}
			})
		}
		wg.Wait()
		elapsed = time.Since(start)
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok.Load(), no.Load(), elapsed, commandCalls(stats, "evalsha") + commandCalls(stats, "eval")
	}

	// Under its rate: every call admitted, on a few asks.
	admitted, refused, elapsed, asked := charge("high", limits.PerSecond(1_000_000))
	if refused != 0 || asked*4 > 2400 {
		t.Errorf("2400 calls under 1000000/s: %d refused, %d asks of Redis in %s; want none refused, under 600 asks (leases)", refused, asked, elapsed)
	}
	t.Logf("under the rate: %d admitted in %s on %d asks", admitted, elapsed, asked)

	// Over it: 2,000 a second with a burst of 400 (leases of up to 40
	// calls: 20 ms of the rate; a quarter of the burst is 100). How often
	// Redis is asked here follows the machine's speed (the slower the run,
	// the more tokens come, each asked for): the flood below counts it.
	rate := limits.PerSecond(2000).WithBurst(400)
	admitted, refused, elapsed, asked = charge("over", rate)
	// The rate's bound over the run, plus what leases may shift into it:
	// a lease's worth (40) per enforcer.
	if bound := 400 + int64(2000*elapsed.Seconds()) + 2*40; admitted > bound || admitted < 400 {
		t.Errorf("admitted %d calls in %s under %s shared by two enforcers; want from 400 (its burst) to %d", admitted, elapsed, rate, bound)
	}
	t.Logf("over the rate: %d admitted, %d refused in %s on %d asks", admitted, refused, elapsed, asked)

	// A flood over a slow rate (10 a second, a burst of 100: too small
	// for leases) is refused mostly without asking: after a refusal an
	// enforcer asks again only once the next token is due. So beyond an
	// ask per call admitted, Redis is asked at most once per caller (they
	// may ask at the same moment) when the burst runs out and when each
	// token comes during the run. Were every refusal asked, the asks
	// would be the calls.
	slow := limits.PerSecond(10).WithBurst(100)
	admitted, refused, elapsed, asked = charge("flood", slow)
	const callers = 8
	tokens := int64(10*elapsed.Seconds()) + 1
	if bound := admitted + callers*(tokens+1); int64(asked) > bound {
		t.Errorf("2400 calls over %s asked Redis %d times in %s (%d admitted, %d refused); want at most %d: one a call admitted, and one a caller a token", slow, asked, elapsed, admitted, refused, bound)
	}
	t.Logf("a flood: %d admitted, %d refused in %s on %d asks", admitted, refused, elapsed, asked)
}

// A rate with a small burst is asked on every call: no call is admitted
// on a lease it does not need.
func TestSmallRateIsAskedEveryCall(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	ctx := context.Background()
	a, b := limits.NewEnforcer(r.Client(t), "test:"), limits.NewEnforcer(r.Client(t), "test:")
	rate := limits.PerMinute(1).WithBurst(4)
	admitted := 0
	for i := range 12 {
		dec, err := []*limits.Enforcer{a, b}[i%2].Charge(ctx, "t", "k", rate)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Allowed {
			admitted++
		}
	}
	if admitted != 4 {
		t.Errorf("admitted %d of 12 under %s; want 4, its burst", admitted, rate)
	}
}

// A key calling over its leased rate gets the whole rate, not less:
// every token charged in Redis is handed out. (redis_rate's AllowAtMost
// charged the fraction of a token it could not hand out, and such a key
// got about three quarters of its rate.) Callers refused wait the
// retry-after they are told, as a client would.
func TestLeasedRateIsNotUnderAdmitted(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	ctx := context.Background()
	rate := limits.PerSecond(500).WithBurst(100) // leases of up to 10 calls
	enforcers := []*limits.Enforcer{limits.NewEnforcer(r.Client(t), "test:"), limits.NewEnforcer(r.Client(t), "test:")}
	var admitted atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		e := enforcers[i%2]
		wg.Go(func() {
			for time.Since(start) < time.Second {
				dec, err := e.Charge(ctx, "t", "flood", rate)
				if err != nil {
					t.Error(err)
					return
				}
				if dec.Allowed {
					admitted.Add(1)
					continue
				}
				time.Sleep(dec.RetryAfter) // what the refusal says
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	allows := 100 + 500*elapsed.Seconds()
	n := float64(admitted.Load())
	t.Logf("admitted %.0f in %s under %s: %.2f × what it allows (%.0f)", n, elapsed, rate, n/allows, allows)
	if n < 0.9*allows || n > allows+2*10 {
		t.Errorf("admitted %.0f calls in %s under %s shared by two enforcers; want from 0.9 × to what it allows (%.0f), plus a lease each", n, elapsed, rate, allows)
	}
}
