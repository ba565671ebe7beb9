package approval

import (
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestAWaitingClaimDoesNotShortenItsMessagesRefusal: a refused message
// (its claim "<seq> <code>", an hour) is redelivered before its Term (the
// process gone after the answer, a Term lost) while its tool's bound
// cannot be read, and its wait, as this delivery computes it (the tool
// not listed: a minute from its publication; another replica's memory of
// registry failures), ended more than an hour ago. awaitBound claims the
// id again for what is left of its wait and an hour: a second. The
// refusal's claim must keep its hour: should the refusal that follows not
// renew it (a Redis blip: the message is delivered again; the process
// stopping), a later delivery whose tool's bound can be read would find
// the id free and hold the call its caller was told was not held.
func TestAWaitingClaimDoesNotShortenItsMessagesRefusal(t *testing.T) {
	t.Parallel()
	rc := testserver.StartRedis(t).Client(t)
	st := &store{rc: rc, prefix: "t:"}
	const id, seq = "refused-ttl", 5
	if got, err := st.claim(t.Context(), id, seq, refusalClaim, false, "expired"); err != nil || got != claimed {
		t.Fatalf("refusal's claim = %q, %v", got, err)
	}
	until := time.Now().Add(-2 * time.Hour) // the wait as the redelivery computes it
	if got, err := st.claim(t.Context(), id, seq, time.Until(until)+refusalClaim, false, ""); err != nil || got != claimed {
		t.Fatalf("waiting claim = %q, %v", got, err)
	}
	if v := rc.Get(t.Context(), st.claimKey(id)).Val(); v != "5 expired" {
		t.Errorf("claim = %q; want the refusal's, 5 expired", v)
	}
	if left := rc.PTTL(t.Context(), st.claimKey(id)).Val(); left < refusalClaim-time.Minute {
		t.Errorf("the refusal's claim lapses in %s; want about %s", left, refusalClaim)
	}
}
