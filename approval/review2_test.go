package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestARefusedMessageIsNotHeldOnItsRedelivery: a gated call over the
// default bound whose tool the registry does not list waits for its
// tool's bound, and is refused expired when its wait ends ("Nothing was
// held or run"). Its message is redelivered before it is terminated: the
// process gone between the answer and the Term, a Term lost, or (here)
// the refusal still answering when the ack wait ends. Meanwhile its tool
// advertises, so the redelivery finds the call within its tool's bound.
// It must not be held: its caller was told it was not, and an approval
// would run it. Before, the refusal's claim of the id was its own
// message's, which bodyScript let write its body, as it does for a
// waiting message's claim: the call was held pending under an answer of
// expired. Not parallel: it shortens the wait for the package.
func TestARefusedMessageIsNotHeldOnItsRedelivery(t *testing.T) {
	defer approval.SetUnknownToolWait(2 * time.Second)()
	f := newFleet(t, nil)
	id := "bulk-refused-" + windlass.NewCallID()
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	approval.SetBeforeRefusalAnswer(f.svc, func(got string) {
		if got != id {
			return
		}
		first := false
		once.Do(func() { first = true; close(entered) })
		if !first {
			return
		}
		select {
		case <-proceed:
		case <-f.t.Context().Done():
		}
	})
	call := windlass.ToolCall{ID: id, Name: "bulkpay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(call)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting message was never refused")
	}
	// Its tool advertises; the message is redelivered after the ack wait
	// (10 s) while its refusal has not answered yet.
	f.StartWorker(worker.Config{}, bulkPay())
	delivered := f.intakeConsumer().Delivered.Consumer
	fleettest.WaitFor(t, 20*time.Second, "the refused message redelivered", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.Delivered.Consumer > delivered
	})
	time.Sleep(2 * time.Second) // the redelivery taken in
	close(proceed)
	fleettest.WaitFor(t, 15*time.Second, "the message settled", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(id))
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	h, herr := f.svc.Get(context.Background(), id)
	switch {
	case err == nil && herr == nil:
		t.Errorf("the call is held (%s) and its caller answered: %.300s", h.Status, answer.Data)
	case err != nil && herr != nil:
		t.Errorf("the call is neither held nor answered")
	}
}
