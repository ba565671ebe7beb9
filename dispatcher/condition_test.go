package dispatcher_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
)

type refundArgs struct {
	Amount float64 `json:"amount"`
	Memo   string  `json:"memo,omitempty"`
}

// TestApprovalConditionRoutesEachCall: a call below the tool's condition
// goes straight to the tool and runs; one above it, and one the condition
// has no answer on within its cost limit (fail closed), go to the approval
// subject, with the approval wait in their deadline, and never reach the
// tool's subject.
func TestApprovalConditionRoutesEachCall(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	refund := windlass.MustFunc("refund", func(ctx context.Context, in refundArgs) (string, error) {
		runs.Add(1)
		return "refunded", nil
	}, windlass.WithApprovalCondition(`args.amount > 100.0 || (has(args.memo) && args.memo.contains("urgent"))`))
	e := newEnv(t, refund)

	if r, err := e.d.Call(t.Context(), "refund", refundArgs{Amount: 20}); err != nil || r.IsError || r.Content != "refunded" || runs.Load() != 1 {
		t.Fatalf("below the condition: %+v, %v (runs %d)", r, err, runs.Load())
	}

	js := e.JetStream()
	approvals, err := js.Stream(t.Context(), layout.ApprovalsStream)
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := js.Stream(t.Context(), layout.CallsStream)
	before, _ := calls.Info(t.Context())
	for _, args := range []refundArgs{{Amount: 500}, {Amount: 5, Memo: strings.Repeat("x", 300_000)}} {
		submitted := time.Now()
		id, err := e.d.Submit(t.Context(), "refund", args)
		if err != nil {
			t.Fatal(err)
		}
		m, err := approvals.GetLastMsgForSubject(t.Context(), layout.ApprovalSubject("refund"))
		if err != nil {
			t.Fatalf("amount %.0f, memo of %d bytes: not on the approval subject: %v", args.Amount, len(args.Memo), err)
		}
		var call windlass.ToolCall
		if err := json.Unmarshal(m.Data, &call); err != nil || call.ID != id {
			t.Errorf("approval message %+v (%v), want call %s", call, err, id)
		}
		if min := submitted.Add(windlass.DefaultTimeout + dispatcher.DefaultQueueAllowance + dispatcher.DefaultApprovalWait); call.Deadline.Before(min) {
			t.Errorf("amount %.0f: deadline %s, want at least %s (the approval wait included)", args.Amount, call.Deadline, min)
		}
	}
	after, _ := calls.Info(t.Context())
	if after.State.Msgs != before.State.Msgs || runs.Load() != 1 {
		t.Errorf("gated calls reached the tool's subject: %d messages more, runs %d", after.State.Msgs-before.State.Msgs, runs.Load())
	}
}
