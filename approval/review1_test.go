package approval_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/internal/layout"
)

// TestACallOverTheDefaultBoundWithoutADeadlineIsNotDeliveredForever: a
// gated call over the default bound, without a deadline (a publisher past
// the dispatcher), of a tool the registry does not know, is delivered
// again every 2 s with nothing to end it: long past its tool's approval
// window (2 s here) it is neither held, nor answered, nor gone from the
// approvals stream. Before 96e9869 it was held and expired with the window.
func TestACallOverTheDefaultBoundWithoutADeadlineIsNotDeliveredForever(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"bulkpay": {Window: 2 * time.Second}})
	call := windlass.ToolCall{ID: "bulk-forever", Name: "bulkpay",
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(call)
	time.Sleep(10 * time.Second) // five times the approval window
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	_, rerr := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(call.ID))
	cons, err := f.JetStream().Consumer(t.Context(), layout.ApprovalsStream, approval.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if errors.Is(rerr, jetstream.ErrMsgNotFound) {
		t.Errorf("unanswered after 5 approval windows; delivered %d times and still pending (%d ack pending): nothing ends the loop", info.Delivered.Consumer, info.NumAckPending)
	}
}
