package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/streamread"
)

// TestApprovalConditionGatesOnlyTheCallsItHoldsFor: pay is gated when
// args.amount > 100.0. A call below runs at once, never held; one above is
// held until a reviewer approves it (here editing it below the condition:
// it runs with its release all the same). A call above the condition
// published straight onto pay's call subject, without a release, is
// refused by the worker, never run and never answered; so is a call below
// the condition that reuses the id of a held call, whose own caller then
// gets its true answer once it is approved.
func TestApprovalConditionGatesOnlyTheCallsItHoldsFor(t *testing.T) {
	t.Parallel()
	f := newFleetWith(t, nil, windlass.WithApprovalCondition(`args.amount > 100.0`))

	// Below: straight to the tool.
	r, err := f.d.Call(t.Context(), "pay", payArgs{To: "bob", Amount: 20}, dispatcher.WithCallID("small"))
	if err != nil || r.IsError || r.Content != "paid 20.00 to bob" || f.runs.Load() != 1 {
		t.Fatalf("below the condition: %+v, %v (runs %d)", r, err, f.runs.Load())
	}
	if _, err := f.svc.Get(t.Context(), "small"); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("the call below the condition reached the approval service: %v", err)
	}

	// Above: held.
	big := f.submit(payArgs{To: "bob", Amount: 500})
	h := f.held(big)
	if h.Status != approval.StatusPending || f.runs.Load() != 1 {
		t.Fatalf("above the condition: held %+v (runs %d), want pending and not run", h, f.runs.Load())
	}

	// Crafted calls on pay's own subject, without a release.
	js := f.JetStream()
	forge := func(id string, args any) uint64 {
		t.Helper()
		body, _ := json.Marshal(windlass.ToolCall{ID: id, Name: "pay", Arguments: mustJSON(t, args), Deadline: time.Now().Add(time.Minute)})
		ack, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: layout.CallSubject("pay", id), Data: body,
			Header: nats.Header{nats.MsgIdHdr: []string{id + "-forged"}, layout.HeaderOrigin: []string{"forger"}}})
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	refused := func(seq uint64) windlass.Refusal {
		t.Helper()
		var rec windlass.Refusal
		fleettest.WaitFor(t, 10*time.Second, "the refusal of the crafted call", func() bool {
			recs, err := f.d.Refusals(context.Background(), "pay", 100)
			for _, r := range recs {
				if r.Seq == seq {
					rec = r
					return err == nil
				}
			}
			return false
		})
		return rec
	}
	if rec := refused(forge("crafted", payArgs{To: "mallory", Amount: 900})); rec.Reason != "no_release" {
		t.Errorf("a crafted call above the condition: refusal %+v, want no_release", rec)
	}
	f.noResult(js, "crafted")
	// Below the condition, under the held call's id.
	if rec := refused(forge(big, payArgs{To: "mallory", Amount: 1})); rec.Reason != "no_release" || rec.CallID != big {
		t.Errorf("a call below the condition under a held call's id: refusal %+v, want no_release", rec)
	}
	if n := f.runs.Load(); n != 1 {
		t.Fatalf("crafted calls ran the tool: runs %d, want 1", n)
	}

	// The reviewer approves, lowering the amount below the condition: the
	// release runs it all the same, and its caller is told the truth.
	code, body := f.do("POST", "/v1/approvals/"+big+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash, "arguments": map[string]any{"to": "bob", "amount": 50}})
	if code != http.StatusOK {
		t.Fatalf("approve with an edit = %d %v", code, body)
	}
	if r := f.wait(big); r.IsError || r.Content != "paid 50.00 to bob" {
		t.Errorf("the approved call: %+v, want the edited arguments run", r)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("runs %d, want 2", n)
	}
}

// noResult fails if the results stream holds a result for callID.
func (f *fleet) noResult(js jetstream.JetStream, callID string) {
	f.t.Helper()
	rs, err := js.Stream(f.t.Context(), layout.ResultsStream)
	if err != nil {
		f.t.Fatal(err)
	}
	data, err := streamread.First(f.t.Context(), js.Conn(), rs, layout.ResultByCall(callID))
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		f.t.Errorf("call %s: a result is stored (%s, %v); a refused call must not be answered", callID, data, err)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestApprovalConditionFailsClosed: arguments on which the condition has
// no answer within its cost limit (a memo long enough that searching it
// costs more than gatecond.CostLimit) send the call for approval instead
// of running it; a short memo below the condition runs at once.
func TestApprovalConditionFailsClosed(t *testing.T) {
	t.Parallel()
	f := newFleetWith(t, nil, windlass.WithApprovalCondition(`args.amount > 100.0 || (has(args.memo) && args.memo.contains("urgent"))`))
	r, err := f.d.Call(t.Context(), "pay", payArgs{To: "bob", Amount: 5, Memo: "thanks"})
	if err != nil || r.IsError || r.Content != "paid 5.00 to bob (a memo of 6 bytes)" {
		t.Fatalf("below the condition: %+v, %v", r, err)
	}
	hostile := f.submit(payArgs{To: "bob", Amount: 5, Memo: strings.Repeat("x", 300_000)})
	if h := f.held(hostile); h.Status != approval.StatusPending || f.runs.Load() != 1 {
		t.Fatalf("a memo over the cost limit: held %+v (runs %d), want it held, not run", h, f.runs.Load())
	}
}
