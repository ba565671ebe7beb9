package approval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// forger publishes on the gated tool's call subject, as anybody who can
// publish there could: copies of released messages, with or without their
// release, altered or not.
type forger struct {
	f  *fleet
	js jetstream.JetStream
}

func newForger(f *fleet) *forger {
	js := f.JetStream()
	return &forger{f: f, js: js}
}

// publish sends body with hdr (a release header, "" for none) under a new
// message id, and returns the stream sequence the calls stream gave it.
func (g *forger) publish(body []byte, hdr, origin string) uint64 {
	g.f.t.Helper()
	m := &nats.Msg{Subject: layout.CallSubject("pay", fleettest.CallIDOf(body)), Data: body, Header: nats.Header{
		layout.HeaderOrigin: []string{origin}, nats.MsgIdHdr: []string{"forged-" + windlass.NewCallID()}}}
	if hdr != "" {
		m.Header.Set(release.Header, hdr)
	}
	ack, err := g.js.PublishMsg(context.Background(), m)
	if err != nil {
		g.f.t.Error(err)
		return 0
	}
	return ack.Sequence
}

// variants are the forgeries of a released message m: the exact copy,
// other arguments, a flipped signature, no release, a malformed body.
func (g *forger) variants(m *nats.Msg) map[string]uint64 {
	var call windlass.ToolCall
	if err := json.Unmarshal(m.Data, &call); err != nil {
		g.f.t.Fatal(err)
	}
	hdr, origin := m.Header.Get(release.Header), m.Header.Get(layout.HeaderOrigin)
	flipped := []byte(hdr)
	flipped[len(flipped)-3] ^= 1
	other := call
	other.Arguments = json.RawMessage(`{"to":"mallory","amount":1000000}`)
	otherBody, _ := json.Marshal(other)
	return map[string]uint64{
		"exact copy":      g.publish(m.Data, hdr, origin),
		"other arguments": g.publish(otherBody, hdr, origin),
		"flipped":         g.publish(m.Data, string(flipped), origin),
		"no release":      g.publish(m.Data, "", origin),
		"malformed":       g.publish([]byte(`{"id":"`+call.ID+`","name":"pay","arguments":"transfer"}`), hdr, origin),
	}
}

// refusals waits until the refusals stream holds a record for every
// sequence in seqs, and returns them by sequence.
func (f *fleet) refusals(seqs ...uint64) map[uint64]windlass.Refusal {
	f.t.Helper()
	js := f.JetStream()
	found := map[uint64]windlass.Refusal{}
	fleettest.WaitFor(f.t, 15*time.Second, fmt.Sprintf("the refusal records of %v", seqs), func() bool {
		if s, err := js.Stream(context.Background(), layout.RefusalsStream); err == nil {
			for next := uint64(1); ; {
				m, err := s.GetMsg(context.Background(), next, jetstream.WithGetMsgSubject(layout.RefusalSubjects))
				if err != nil {
					break
				}
				next = m.Sequence + 1
				var rec windlass.Refusal
				if json.Unmarshal(m.Data, &rec) == nil {
					found[rec.Seq] = rec
				}
			}
		}
		for _, seq := range seqs {
			if _, ok := found[seq]; !ok {
				return false
			}
		}
		return true
	})
	return found
}

// capture records the approval service's releases (the messages under a
// release:… message id) on the gated tool's call subject, the first by
// call id; onRelease, when set, runs the moment the first message of a call id
// arrives, on the subscription's goroutine.
type capture struct {
	t         *testing.T
	mu        sync.Mutex
	first     map[string]*nats.Msg
	onRelease func(id string, m *nats.Msg)
}

func (f *fleet) capture() *capture {
	c := &capture{t: f.t, first: map[string]*nats.Msg{}}
	sub, err := f.Conn().Subscribe(layout.CallsOfTool("pay"), func(m *nats.Msg) {
		var call windlass.ToolCall
		if !strings.HasPrefix(m.Header.Get(nats.MsgIdHdr), "release:") || json.Unmarshal(m.Data, &call) != nil {
			return // not the approval service's
		}
		c.mu.Lock()
		_, seen := c.first[call.ID]
		if !seen {
			c.first[call.ID] = m
		}
		hook := c.onRelease
		c.mu.Unlock()
		if !seen && hook != nil {
			hook(call.ID, m)
		}
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

// release waits for the first message published for id.
func (c *capture) release(id string) *nats.Msg {
	c.t.Helper()
	var m *nats.Msg
	fleettest.WaitFor(c.t, 15*time.Second, "a release of "+id, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		m = c.first[id]
		return m != nil
	})
	return m
}

// TestForgedGatedCallsNeverDecideTheAnswer publishes forged copies of a
// gated call (a) while the real call is held, (b) racing its release, the
// moment the release appears, and (c) after it ran: no release, a release
// copied from another call, other arguments than approved, a flipped
// signature, a release already used, a malformed body. The real caller's
// answer is always the true outcome — the approved transfer's result — the
// transfer runs exactly once, and each forgery is on record as a refusal.
func TestForgedGatedCallsNeverDecideTheAnswer(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	g := newForger(f)
	captured := f.capture()

	// Another call, approved and run, whose release is copied below.
	other := f.submit(payArgs{To: "carol", Amount: 1}, dispatcher.WithCallID("other"))
	f.approve(other)
	otherRelease := captured.release(other)
	if r := f.wait(other); r.IsError {
		t.Fatalf("the other call: %+v", r)
	}

	// (a) The real call is held; forgeries of it arrive.
	results := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "pay", payArgs{To: "bob", Amount: 5}, dispatcher.WithCallID("pay-1"))
		results <- r
	}()
	f.held("pay-1")
	body, _ := json.Marshal(windlass.ToolCall{ID: "pay-1", Name: "pay", Arguments: json.RawMessage(`{"to":"bob","amount":5}`)})
	held := []uint64{
		g.publish(body, "", "anonymous"),
		g.publish(body, otherRelease.Header.Get(release.Header), otherRelease.Header.Get(layout.HeaderOrigin)),
		g.publish([]byte(`{"id":"pay-1","name":"pay"`), "", "anonymous"),
	}
	recs := f.refusals(held...)
	for i, want := range []release.Reason{release.ReasonNoRelease, release.ReasonOtherCall, release.ReasonMalformed} {
		if recs[held[i]].Reason != string(want) {
			t.Errorf("(a) forgery %d: refusal %+v, want %s", i, recs[held[i]], want)
		}
	}
	st, err := f.d.Status(t.Context(), "pay-1")
	if err != nil || st.State != dispatcher.StateAwaitingApproval {
		t.Fatalf("(a) after the forgeries the real call is %+v (%v), want still awaiting approval", st, err)
	}

	// (b) The forgeries race the release: published the instant the
	// release appears on the subject.
	racedCh := make(chan map[string]uint64, 1)
	captured.mu.Lock()
	captured.onRelease = func(id string, m *nats.Msg) {
		if id == "pay-1" {
			racedCh <- g.variants(m)
		}
	}
	captured.mu.Unlock()
	f.approve("pay-1")
	var raced map[string]uint64
	select {
	case raced = <-racedCh:
	case <-time.After(15 * time.Second):
		t.Fatal("(b) the release of pay-1 never appeared on the call subject")
	}
	select {
	case r := <-results:
		if r.IsError || r.Content != "paid 5.00 to bob" {
			t.Errorf("(b) the caller was told %+v, want the transfer's result", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("(b) the caller got no answer")
	}
	// Every variant but the exact copy is refused for what it is. The
	// exact copy and the real release are one call's release, which runs
	// once: whichever claimed it second is refused as reused.
	reusedRefused := func() (windlass.Refusal, bool) {
		for _, r := range f.refusals() {
			if r.CallID == "pay-1" && r.Reason == string(release.ReasonReused) {
				return r, true
			}
		}
		return windlass.Refusal{}, false
	}
	recs = f.refusals(raced["other arguments"], raced["flipped"], raced["no release"], raced["malformed"])
	for name, want := range map[string]release.Reason{"other arguments": release.ReasonArgsMismatch, "flipped": release.ReasonBadSignature,
		"no release": release.ReasonNoRelease, "malformed": release.ReasonMalformed} {
		if got := recs[raced[name]].Reason; got != string(want) {
			t.Errorf("(b) %s: refused %s, want %s", name, got, want)
		}
	}
	fleettest.WaitFor(t, 15*time.Second, "(b) the exact copy or the release refused as reused", func() bool {
		_, ok := reusedRefused()
		return ok
	})

	// (c) After it ran: the same forgeries again.
	after := g.variants(captured.release("pay-1"))
	var afterSeqs []uint64
	for _, seq := range after {
		afterSeqs = append(afterSeqs, seq)
	}
	recs = f.refusals(afterSeqs...)
	if got := recs[after["exact copy"]].Reason; got != string(release.ReasonReused) {
		t.Errorf("(c) the exact copy: refused %s, want reused", got)
	}
	if r := f.wait("pay-1"); r.IsError || r.Content != "paid 5.00 to bob" {
		t.Errorf("(c) the stored answer is %+v", r)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("the gated tool ran %d times, want twice (the other call, and pay-1 once)", n)
	}
}

// TestReplayAfterRedisAndLedgerLoss: a gated call approved and run; then
// Redis loses every key (FLUSHALL: the approval store, and what a Redis
// ledger held), and, separately, the release ledger loses the call's
// entry. Each time the exact released message is replayed under a new
// message id: it does not run, and the caller's answer is unchanged.
func TestReplayAfterRedisAndLedgerLoss(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	g := newForger(f)
	captured := f.capture()
	id := f.submit(payArgs{To: "bob", Amount: 7})
	f.approve(id)
	if r := f.wait(id); r.IsError || r.Content != "paid 7.00 to bob" {
		t.Fatalf("the released call: %+v", r)
	}
	m := captured.release(id)

	if err := f.cfg.Redis.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	seq := g.publish(m.Data, m.Header.Get(release.Header), m.Header.Get(layout.HeaderOrigin))
	if rec := f.refusals(seq)[seq]; rec.Reason != string(release.ReasonReused) {
		t.Errorf("after FLUSHALL: the replay was refused %q, want reused", rec.Reason)
	}

	kv, err := g.js.KeyValue(t.Context(), layout.ReleasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), layout.CallToken(id)); err != nil {
		t.Fatal(err)
	}
	seq = g.publish(m.Data, m.Header.Get(release.Header), m.Header.Get(layout.HeaderOrigin))
	if rec := f.refusals(seq)[seq]; rec.Reason != string(release.ReasonAnswered) {
		t.Errorf("after the ledger lost the entry: the replay was refused %q, want already_answered", rec.Reason)
	}
	if r := f.wait(id); r.IsError || r.Content != "paid 7.00 to bob" {
		t.Errorf("the caller's answer is now %+v", r)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the gated tool ran %d times, want once", n)
	}
	// An operator sees both, by tool.
	recs, err := f.d.Refusals(t.Context(), "pay", 0)
	if err != nil || len(recs) != 2 || recs[0].CallID != id || recs[1].Reason != string(release.ReasonAnswered) {
		t.Errorf("Refusals(pay) = %+v, %v; want the two replays", recs, err)
	}
	if recs, err := f.d.Refusals(t.Context(), "other", 0); err != nil || len(recs) != 0 {
		t.Errorf("Refusals(other) = %+v, %v; want none", recs, err)
	}
}

// approve approves id as alice, with the hash she saw.
func (f *fleet) approve(id string) {
	f.t.Helper()
	h := f.held(id)
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK {
		f.t.Fatalf("approve %s = %d %v", id, code, body)
	}
}
