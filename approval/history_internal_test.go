package approval

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestHistoryReadsTheCallsIndex: with 200 other calls in the audit log, a
// call's history is its own entries, in order, read with one command per
// entry and one for the index, not by scanning the log; a call held before
// the index existed (no audit_ids) still gets its entries from a bounded
// scan; an unknown call is ErrNotFound.
func TestHistoryReadsTheCallsIndex(t *testing.T) {
	t.Parallel()
	rc := testserver.StartRedis(t).Client(t)
	st := &store{rc: rc, prefix: "t:"}
	now := time.Now()
	holdApproved(t, st, "target", now)
	for i := range 200 {
		holdApproved(t, st, fmt.Sprintf("other-%d", i), now)
	}
	if err := st.markReleased(t.Context(), "target"); err != nil {
		t.Fatal(err)
	}
	var counter commandCounter
	rc.AddHook(&counter)
	events, truncated, err := st.history(t.Context(), "target")
	if err != nil || truncated {
		t.Fatalf("history = %v, truncated %v", err, truncated)
	}
	kinds := func(evs []AuditEvent) []string {
		var out []string
		for _, ev := range evs {
			if ev.CallID != "target" {
				t.Errorf("an entry of call %q in the history of target", ev.CallID)
			}
			out = append(out, ev.Event+":"+ev.Actor)
		}
		return out
	}
	want := []string{"requested:", "approved:alice", "released:system"}
	if got := kinds(events); !slices.Equal(got, want) {
		t.Errorf("history = %v, want %v", got, want)
	}
	if n := counter.n.Load(); n != int64(1+len(want)) {
		t.Errorf("history sent %d commands, want %d (the index, then one per entry)", n, 1+len(want))
	}

	// A call without the index: its entries are found all the same.
	if err := rc.HDel(t.Context(), st.callKey("target"), "audit_ids").Err(); err != nil {
		t.Fatal(err)
	}
	events, _, err = st.history(t.Context(), "target")
	if got := kinds(events); err != nil || !slices.Equal(got, want) {
		t.Errorf("history without the index = %v, %v; want %v", got, err, want)
	}

	if _, _, err := st.history(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("history of an unknown call = %v, want ErrNotFound", err)
	}
}
