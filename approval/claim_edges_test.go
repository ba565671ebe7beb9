package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestAnInterruptedHoldWaitingForItsBoundIsNotDropped: a gated call over
// the default bound, within its tool's own, has its body written and then
// its state's write fails (a Redis blip, the process gone between the
// two): the message is redelivered. Meanwhile its tool's registry entry
// cannot be read, so the redelivery waits for its tool's bound
// (awaitBound). The id's body is the message's own: it must go on
// waiting, and be held once the bound can be read. With store.claim
// counting any body as "held by another", the message's own body made it
// drop itself: the call was never held, its caller never answered.
func TestAnInterruptedHoldWaitingForItsBoundIsNotDropped(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.interruptedBulkHold("bulk-interrupted-", time.Hour)
	// Redelivered after the ack wait, then every 2 s while it waits; or
	// settled (dropped).
	fleettest.WaitFor(t, 30*time.Second, "the message redelivered and waiting, or settled", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.Delivered.Consumer >= 2 && (info.Delivered.Consumer >= 3 || info.NumAckPending == 0)
	})
	if info := f.intakeConsumer(); info.NumAckPending != 1 {
		t.Fatalf("the interrupted call's message was settled (%d unacknowledged) while its tool's bound was unknown: dropped", info.NumAckPending)
	}
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(id)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("answered while waiting for its bound (%v)", err)
	}

	// Its entry written again (its workers advertise).
	if err := f.Redis.Client(t).Del(t.Context(), "windlass:tool:{bulkpay}").Err(); err != nil {
		t.Fatal(err)
	}
	f.StartWorker(worker.Config{}, bulkPay())
	var h *approval.HeldCall
	fleettest.WaitFor(t, 15*time.Second, "the call held once its bound is read", func() bool {
		h, err = f.svc.Get(context.Background(), id)
		return err == nil
	})
	if h.Status != approval.StatusPending {
		t.Errorf("held as %s; want pending", h.Status)
	}
}

// interruptedBulkHold publishes a call of bulkpay over the default bound
// (within the tool's own), due in within, whose hold is interrupted after
// its body (failHold); then makes the tool's registry entry unreadable
// (its worker stopped, its spec garbled) before the message's redelivery
// (the ack wait, 10 s), and returns the call's id.
func (f *fleet) interruptedBulkHold(idPrefix string, within time.Duration) string {
	f.t.Helper()
	id := idPrefix + windlass.NewCallID()
	hook := f.failingHolds(id)
	w := f.StartWorker(worker.Config{}, bulkPay())
	hook.armed.Store(true)
	call := windlass.ToolCall{ID: id, Name: "bulkpay", Deadline: time.Now().Add(within),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(call)
	fleettest.WaitFor(f.t, 10*time.Second, "the hold interrupted after its body", hook.failed.Load)
	if err := w.Stop(); err != nil {
		f.t.Fatal(err)
	}
	if err := f.Redis.Client(f.t).HSet(f.t.Context(), "windlass:tool:{bulkpay}", "spec", "{not json").Err(); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// TestAnInterruptedHoldRefusedOnItsRedeliveryIsAnswered: the same
// interrupted hold, its deadline reached while its tool's bound cannot be
// read on its redelivery: its caller is answered expired (what a call
// never held is told), and nothing is left held. With store.claim counting
// the message's own body as another's hold, the message was dropped
// unanswered: its caller waited for nothing.
func TestAnInterruptedHoldRefusedOnItsRedeliveryIsAnswered(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.interruptedBulkHold("bulk-interrupted-late-", 5*time.Second)
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	var answer *jetstream.RawStreamMsg
	fleettest.WaitFor(t, 30*time.Second, "the caller answered after the redelivery", func() bool {
		answer, err = results.GetLastMsgForSubject(context.Background(), layout.ResultByCall(id))
		return err == nil
	})
	var r windlass.ToolResult
	if err := json.Unmarshal(answer.Data, &r); err != nil || r.Code() != windlass.CodeExpired {
		t.Errorf("caller answered %v %.300q (%v); want expired", r.Code(), r.Content, err)
	}
	if h, err := f.svc.Get(t.Context(), id); err == nil {
		t.Errorf("held as well as answered: %+v", h.Status)
	}
}

// TestAWaitingCallsIDIsNotFreeBeforeItsLastDelivery: a gated call over
// the default bound whose tool the registry does not list waits for its
// tool's bound until its deadline, delivered every 2 s. Its claim on the
// id must last until the delivery that settles it (answered expired), not
// end at the deadline itself: in between, a message of its id with other
// arguments within the bound (any publisher on windlass.approval.*) was
// held in its place, and the waiting call was dropped unanswered.
func TestAWaitingCallsIDIsNotFreeBeforeItsLastDelivery(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := "bulk-gap-" + windlass.NewCallID()
	deadline := time.Now().Add(4 * time.Second)
	real := windlass.ToolCall{ID: id, Name: "bulkpay", Deadline: deadline,
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(real)
	rc := f.Redis.Client(t)
	claimKey := approval.DefaultPrefix + "claim:{" + id + "}"
	fleettest.WaitFor(t, 10*time.Second, "the waiting call's claim", func() bool {
		return rc.Exists(context.Background(), claimKey).Val() == 1
	})
	// Past the deadline, as soon as the claim lapses, before the real
	// call's next delivery (or once it is answered: the claim must not
	// lapse before).
	time.Sleep(time.Until(deadline))
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 5*time.Second, "the id free, or the waiting call answered", func() bool {
		if rc.Exists(context.Background(), claimKey).Val() == 0 {
			return true
		}
		_, err := results.GetLastMsgForSubject(context.Background(), layout.ResultByCall(id))
		return err == nil
	})
	forged := windlass.ToolCall{ID: id, Name: "bulkpay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{"amounts":[1000000]}`)}
	f.publishApprovalAs("bulkpay", forged, "forged-"+windlass.NewCallID())
	fleettest.WaitFor(t, 15*time.Second, "both messages settled", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.Delivered.Stream >= 2 && info.NumPending == 0 && info.NumAckPending == 0
	})
	if h, err := f.svc.Get(t.Context(), id); err == nil {
		t.Errorf("a message of other arguments was held in the waiting call's place: %s", h.Arguments)
	}
	m, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(id))
	if err != nil {
		t.Fatalf("the waiting call's caller was never answered: %v", err)
	}
	var r windlass.ToolResult
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Code() != windlass.CodeExpired {
		t.Errorf("caller answered %v %.300q; want expired", r.Code(), r.Content)
	}
}

// TestAnInterruptedHoldIsFinishedOnlyByItsOwnMessage: a gated call's body
// is written, then its state's write fails (a Redis blip, the process
// gone between the two), and its message waits for its redelivery. A
// second message of the id with the same arguments but another requester
// and origin (anyone who may publish calls may send one, having seen the
// first) comes first. It is not that call's message: the call is held
// from the first's redelivery, as its requester asked, and its answer
// goes to its own origin. Before, the second message finished the hold
// (the same arguments' hash was all it was checked by), so the reviewers
// saw the second's requester, and the release would have sent the answer
// to the second's origin.
func TestAnInterruptedHoldIsFinishedOnlyByItsOwnMessage(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := "pay-own-" + windlass.NewCallID()
	hook := f.failingHolds(id)
	hook.armed.Store(true)

	args := json.RawMessage(`{"to":"bob","amount":5}`)
	first := windlass.ToolCall{ID: id, Name: "pay", Arguments: args, Deadline: time.Now().Add(time.Hour), Metadata: map[string]string{"requester": "alice"}}
	f.publishApproval(first)
	fleettest.WaitFor(t, 10*time.Second, "the first message's hold interrupted after its body", hook.failed.Load)

	second := first
	second.Metadata = map[string]string{"requester": "mallory"}
	data, _ := json.Marshal(second)
	if _, err := f.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: layout.ApprovalSubject("pay"), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{"second-" + windlass.NewCallID()}, layout.HeaderOrigin: []string{"someone"}}}); err != nil {
		t.Fatal(err)
	}
	var h *approval.HeldCall
	fleettest.WaitFor(t, 45*time.Second, "the call held", func() bool {
		var err error
		h, err = f.svc.Get(context.Background(), id)
		return err == nil
	})
	if h.Requester != "alice" {
		t.Errorf("the call is held as requested by %q; want alice, whose message it is (the second message finished its hold)", h.Requester)
	}
}

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
	var refusals atomic.Int32
	approval.SetBeforeRefusalAnswer(f.svc, func(got string) {
		if got != id || refusals.Add(1) != 1 {
			return
		}
		close(entered)
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
	fleettest.WaitFor(t, 15*time.Second, "the redelivery refused again, or held", func() bool {
		if refusals.Load() > 1 {
			return true
		}
		_, err := f.svc.Get(context.Background(), id)
		return err == nil
	})
	close(proceed)
	fleettest.WaitFor(t, 15*time.Second, "the message settled", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	f.heldOrAnswered(id)
}

// TestARefusalWhoseAnswerCannotBeStoredIsDeliveredAgain: a message the
// intake refuses (here it names another tool than its subject's) cannot
// have its answer stored: the results stream refuses writes (full, here;
// a NATS outage or a lost leader would do the same). The refusal does not
// terminate its message with its caller unanswered: the message is
// delivered again, refused again (its claim says so), and its caller is
// answered once the stream takes writes. Before, the refusal logged the
// failed answer and terminated the message: the caller waited for its
// deadline and was never told.
func TestARefusalWhoseAnswerCannotBeStoredIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	var unanswered atomic.Int32
	f.cfg.Logger = slog.New(countingHandler{match: "could not answer the caller", n: &unanswered})
	f.startService()
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := results.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	open := info.Config
	full := open
	full.MaxMsgs, full.Discard = max(int64(info.State.Msgs), 1), jetstream.DiscardNew
	if info.State.Msgs == 0 {
		if _, err := f.JetStream().Publish(t.Context(), layout.ResultSubject("filler", "filler"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.JetStream().UpdateStream(t.Context(), full); err != nil {
		t.Fatal(err)
	}

	id := "refused-unstored-" + windlass.NewCallID()
	refused := windlass.ToolCall{ID: id, Name: "bulkpay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{"amounts":[1]}`)}
	f.publishApprovalAs("pay", refused, "refused-"+windlass.NewCallID())
	fleettest.WaitFor(t, 90*time.Second, "every delivery of the refused message so far gave up its answer", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.Delivered.Stream >= 1 && unanswered.Load() >= int32(info.Delivered.Consumer)
	})
	if _, err := f.JetStream().UpdateStream(t.Context(), open); err != nil {
		t.Fatal(err)
	}
	var answer *jetstream.RawStreamMsg
	fleettest.WaitFor(t, 30*time.Second, "the refused call's caller answered", func() bool {
		answer, err = results.GetLastMsgForSubject(context.Background(), layout.ResultByCall(id))
		return err == nil
	})
	var r windlass.ToolResult
	if err := json.Unmarshal(answer.Data, &r); err != nil || r.Code() != windlass.CodeInvalidCall {
		t.Errorf("caller answered %v %.300q (%v); want invalid_call", r.Code(), r.Content, err)
	}
}

// countingHandler counts the log records whose message contains match.
type countingHandler struct {
	match string
	n     *atomic.Int32
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }
