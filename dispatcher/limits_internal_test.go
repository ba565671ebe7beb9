package dispatcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/limits"
)

// TestSeenCountAdmitsAQuarterWithoutAsking: a dispatcher admits without
// asking Redis only while the count it last saw, plus the calls it
// admitted since, stays within a quarter of the cap, and only on a fresh
// count; a count Redis gives replaces the one seen, and the calls
// admitted since leave the count as their slots are recorded.
func TestSeenCountAdmitsAQuarterWithoutAsking(t *testing.T) {
	now := time.Now()
	var c seenCount
	// room probes for room without keeping the claim.
	room := func(capacity int, at time.Time) bool {
		if !c.claim(capacity, at) {
			return false
		}
		c.settled()
		return true
	}
	if room(8, now) {
		t.Fatal("room before Redis ever said a count")
	}
	if !room(0, now) || !room(-1, now) {
		t.Fatal("no room under no cap")
	}
	c.counted(0, now)
	admitted := 0
	for range 100 {
		if !c.claim(8, now) {
			break
		}
		admitted++
	}
	if admitted != 2 {
		t.Fatalf("admitted %d without asking under a cap of 8 from 0; want 2 (a quarter)", admitted)
	}
	c.recorded(1, now) // the first one's slot recorded: 1 held, 1 admitted since
	if room(8, now) {
		t.Error("room with 1 held and 1 admitted since, under a cap of 8")
	}
	c.recorded(2, now) // the second one's
	if c.held != 2 || c.since != 0 {
		t.Errorf("held %d, since %d; want 2 and 0", c.held, c.since)
	}
	c.counted(1, now) // a call Redis decided saw one slot freed
	if !room(8, now) {
		t.Error("no room with 1 held under a cap of 8")
	}
	if room(8, now.Add(freshFor)) {
		t.Error("room on a count freshFor old")
	}
	c.claim(0, now)
	c.claim(0, now)
	c.settled() // one of them could not be recorded, or ended before it was
	if c.since != 1 {
		t.Errorf("since %d after two claimed and one settled; want 1", c.since)
	}
	c.counted(5, now) // a batch's count, for a take undone: since is unchanged
	if c.held != 5 || c.since != 1 {
		t.Errorf("held %d, since %d after counted(5); want 5 and 1", c.held, c.since)
	}
}

// TestIdleRulesAreForgotten: admission keeps the resolved limits of each
// tool × key it saw; one unused for a minute is forgotten by the next
// sweep, so serving many keys in turn does not grow the map for ever, and
// a forgotten key's rule is made again on its next call.
func TestIdleRulesAreForgotten(t *testing.T) {
	t.Parallel()
	a := newAdmission(limits.Config{Default: limits.Limit{MaxInFlight: 8}}, nil)
	rules := func() (n int) {
		a.rules.Range(func(any, any) bool { n++; return true })
		return n
	}
	t0 := time.Now()
	for i := range 50 {
		a.ruleOf("t", fmt.Sprint("k", i), t0)
	}
	a.ruleOf("t", "later", t0.Add(30*time.Second)) // no sweep due: the last was at t0
	if n := rules(); n != 51 {
		t.Fatalf("%d rules; want 51", n)
	}
	r := a.ruleOf("t", "latest", t0.Add(61*time.Second)) // a sweep: the 50 are a minute idle
	if n := rules(); n != 2 {
		t.Fatalf("%d rules after the sweep; want the two used within a minute", n)
	}
	if r.limit.MaxInFlight != 8 {
		t.Errorf("rule %+v; want the configured cap", r.limit)
	}
	if again := a.ruleOf("t", "k0", t0.Add(62*time.Second)); again.limit.MaxInFlight != 8 || rules() != 3 {
		t.Errorf("k0 after it was forgotten: %+v, %d rules; want its rule made again", again.limit, rules())
	}
}
