package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// TestHTMLArgumentsAreReleasedAsSubmitted: a gated call the dispatcher
// accepted inline (its size checked with room for the release) holds
// arguments full of '<', as HTML does. It is held, approved, released and
// run once, and the reviewer is told released. Before, the service
// re-encoded the call with json.Marshal, which writes '<' as \u003c (6
// bytes for 1): the release no longer fit the max payload, the caller was
// answered payload_too_large for an approved call, and the reviewer was
// told released: true for a call never published. (Found by a review
// helper.)
func TestHTMLArgumentsAreReleasedAsSubmitted(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	// 200,000 '<' fit the dispatcher's inline limit (256 KiB) with the
	// release's room; escaped they are 1.2 MB, over the 1 MiB max payload.
	args := json.RawMessage(fmt.Sprintf(`{"to":"bob","amount":1,"memo":%q}`, strings.Repeat("<", 200_000)))
	id, err := f.d.Submit(t.Context(), "pay", args)
	if err != nil {
		t.Fatal(err)
	}
	h := f.held(id)
	if h.ArgumentsRef != nil {
		t.Fatalf("held by reference; the test wants an inline call")
	}
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.IsError || f.runs.Load() != 1 {
		t.Errorf("an accepted, approved call: caller got %s %.200q (runs %d), want it run once", r.Code(), r.Content, f.runs.Load())
	}
	after, _ := f.svc.Get(t.Context(), id)
	if code != http.StatusOK || body["released"] != true || !after.Released || after.Undeliverable != "" {
		t.Errorf("approve = %d released=%v; the service's record says released=%v undeliverable=%q; want released", code, body["released"], after.Released, after.Undeliverable)
	}
}

// TestAnApprovalThatCannotBeReleasedSaysSo: a gated call that came another
// way than through a dispatcher (published straight onto the approvals
// subject) is too large to release. Its approval answers the reviewer
// "not released, undeliverable payload_too_large", as its record says, and
// its caller payload_too_large. Before, the reviewer was told released:
// true for a call never published. (Found by a review helper.)
func TestAnApprovalThatCannotBeReleasedSaysSo(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	limit := f.JetStream().Conn().MaxPayload()
	call := windlass.ToolCall{ID: "too-large-to-release", Name: "pay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(fmt.Sprintf(`{"to":"bob","amount":1,"memo":%q}`, strings.Repeat("x", int(limit)-600)))}
	data, _ := json.Marshal(call)
	if _, err := f.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: layout.ApprovalSubject("pay"), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{call.ID}, layout.HeaderOrigin: []string{f.d.ID()}}}); err != nil {
		t.Fatal(err)
	}
	h := f.held(call.ID)
	code, body := f.do("POST", "/v1/approvals/"+call.ID+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	if code != http.StatusOK || body["released"] == true || body["undeliverable"] != string(windlass.CodePayloadTooLarge) {
		t.Errorf("approve = %d released=%v undeliverable=%v; want not released, undeliverable payload_too_large", code, body["released"], body["undeliverable"])
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if r, err := f.d.Wait(ctx, call.ID); err != nil || r.Code() != windlass.CodePayloadTooLarge {
		t.Errorf("caller got %v %.200q, %v; want payload_too_large", r.Code(), r.Content, err)
	}
	if n := f.runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
}

// TestASecondMessageOfAHeldIDLeavesItAlone: a second message on the
// approvals subject with the id of a held call (another dispatcher's, or
// any publisher's on windlass.approval.*) is found held and changes
// nothing: the reviewers see, approve and release the first call's
// arguments, and it runs once with them. Before, the second message's body
// was written over the held call's: the dashboard showed its arguments
// under the first call's hash, the release carried them, the worker
// dropped it, and the approved call never ran. (Found by a review helper.)
func TestASecondMessageOfAHeldIDLeavesItAlone(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 5})
	orig := f.held(id)

	other := windlass.ToolCall{ID: id, Name: "pay", Arguments: json.RawMessage(`{"to":"mallory","amount":1}`), Deadline: time.Now().Add(time.Hour)}
	data, _ := json.Marshal(other)
	if _, err := f.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: layout.ApprovalSubject("pay"), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{"second-" + windlass.NewCallID()}, layout.HeaderOrigin: []string{"someone"}}}); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the second message taken in and acked", func() bool {
		c, err := f.JetStream().Consumer(context.Background(), layout.ApprovalsStream, approval.ConsumerName)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream >= 2
	})
	h, err := f.svc.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if string(h.Arguments) != string(orig.Arguments) {
		t.Errorf("the held call's arguments changed under it: %s -> %s, args_hash still %s (the first's)", orig.Arguments, h.Arguments, h.ArgsHash)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK || body["released"] != true {
		t.Errorf("approve = %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if r, err := f.d.Wait(ctx, id); err != nil || r.Content != "paid 5.00 to bob" || f.runs.Load() != 1 {
		t.Errorf("the approved call: %v %.200q, %v (runs %d); want it run once with the arguments approved", r.Code(), r.Content, err, f.runs.Load())
	}
}

// TestAHeldCallOfTooManyValuesIsNotDecoded: a gated call published
// straight onto the approvals subject (not through a dispatcher, which
// bounds its arguments) with more JSON values than the tool takes, in a
// form the canonical hash would decode (an escape), is answered
// invalid_arguments at the intake and not held. Before, the intake decoded
// them all to hash them. (Found by a review helper.)
func TestAHeldCallOfTooManyValuesIsNotDecoded(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	call := windlass.ToolCall{ID: "many-values", Name: "pay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(`{"to":"bob","amount":1,"memo":"a\nb","xs":[` + strings.Repeat("0,", 200_000) + `0]}`)}
	f.publishApproval(call)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if r, err := f.d.Wait(ctx, call.ID); err != nil || r.Code() != windlass.CodeInvalidArguments || !strings.Contains(r.Content, "max_argument_values, 100000") {
		t.Errorf("caller got %v %.300q, %v; want invalid_arguments naming the bound", r.Code(), r.Content, err)
	}
	if h, err := f.svc.Get(t.Context(), call.ID); err == nil {
		t.Errorf("the call is held: %+v", h.Status)
	}
}

// TestACallOverTheDefaultBoundWaitsForItsToolsBound: a gated call of more
// JSON values than the default bound, published straight onto the
// approvals subject while the registry has no spec of its tool (Redis
// restarted empty, its workers not advertised yet), is neither held (its
// arguments would be hashed without a bound) nor refused (its tool may
// take that many): it is delivered again until the registry has the
// tool's own bound, then held. Before, the intake hashed arguments of any
// size whenever the registry could not say.
func TestACallOverTheDefaultBoundWaitsForItsToolsBound(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	call := windlass.ToolCall{ID: "bulk-pay", Name: "bulkpay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(call)

	// Delivered twice: the intake left it for later, at least once.
	fleettest.WaitFor(t, 15*time.Second, "the call delivered again", func() bool {
		cons, err := f.JetStream().Consumer(t.Context(), layout.ApprovalsStream, approval.ConsumerName) // the service may not have made it yet
		if err != nil {
			return false
		}
		info, err := cons.Info(t.Context())
		return err == nil && info.Delivered.Consumer >= 2
	})
	if h, err := f.svc.Get(t.Context(), call.ID); err == nil {
		t.Fatalf("held while its tool's bound was unknown: %+v", h.Status)
	}
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(call.ID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("answered while its tool's bound was unknown (%v)", err)
	}

	// Its tool advertised, with a bound that takes it: held.
	f.StartWorker(worker.Config{}, bulkPay())
	if h := f.held(call.ID); h.Status != approval.StatusPending || h.ArgsHash == "" {
		t.Errorf("held as %+v; want pending with its arguments' hash", h.Status)
	}
}

// TestACallOverTheDefaultBoundPastItsDeadlineIsAnsweredExpired: the same
// call, its deadline reached while its tool's bound is still unknown, is
// answered expired (nothing held or run), not delivered forever.
func TestACallOverTheDefaultBoundPastItsDeadlineIsAnsweredExpired(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	call := windlass.ToolCall{ID: "bulk-late", Name: "bulkpay", Deadline: time.Now().Add(3 * time.Second),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(call)
	f.expiredUnheld(call.ID, "not in the registry")
}

// TestACallOverTheDefaultBoundWithoutADeadlineExpiresWithItsWindow: the
// same call without a deadline (only a publisher past the dispatcher sends
// one) is answered expired once its tool's approval window has passed
// since it was published, what it would have had if held at once: it is
// not delivered again for ever. (Found by a review helper: before, nothing
// ended the loop.)
func TestACallOverTheDefaultBoundWithoutADeadlineExpiresWithItsWindow(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"bulkpay": {Window: 2 * time.Second}})
	call := windlass.ToolCall{ID: "bulk-no-deadline", Name: "bulkpay",
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(call)
	f.expiredUnheld(call.ID, "approval window")
}

// bulkPay is a gated tool that takes twice the default bound of values.
func bulkPay() windlass.Tool {
	return windlass.MustFunc("bulkpay", func(ctx context.Context, in struct {
		Amounts []float64 `json:"amounts"`
	}) (int, error) {
		return len(in.Amounts), nil
	}, windlass.WithApproval(), windlass.WithMaxArgumentValues(2*windlass.DefaultMaxArgumentValues))
}

// intakeConsumer is the approval service's consumer's info; nil while it
// cannot be read (the service has not made it yet).
func (f *fleet) intakeConsumer() *jetstream.ConsumerInfo {
	c, err := f.JetStream().Consumer(context.Background(), layout.ApprovalsStream, approval.ConsumerName)
	if err != nil {
		return nil
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return nil
	}
	return info
}

// expiredUnheld waits for the answer of the call id, which must be
// expired with a message containing why, the call not held.
func (f *fleet) expiredUnheld(id, why string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 30*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil || r.Code() != windlass.CodeExpired || !strings.Contains(r.Content, why) {
		f.t.Errorf("caller got %v %.300q, %v; want expired, saying %q", r.Code(), r.Content, err, why)
	}
	if h, err := f.svc.Get(f.t.Context(), id); err == nil {
		f.t.Errorf("the call is held: %+v", h.Status)
	}
}

// publishApproval publishes call straight onto its tool's approvals
// subject, as a dispatcher would but past its checks.
func (f *fleet) publishApproval(call windlass.ToolCall) {
	f.t.Helper()
	f.publishApprovalAs(call.Name, call, call.ID)
}

// publishApprovalAs publishes call onto tool's approvals subject under the
// message id msgID.
func (f *fleet) publishApprovalAs(tool string, call windlass.ToolCall, msgID string) {
	f.t.Helper()
	data, err := json.Marshal(call)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.JetStream().PublishMsg(f.t.Context(), &nats.Msg{Subject: layout.ApprovalSubject(tool), Data: data,
		Header: nats.Header{nats.MsgIdHdr: []string{msgID}, layout.HeaderOrigin: []string{f.d.ID()}}}); err != nil {
		f.t.Fatal(err)
	}
}

// heldCallUntouched waits until the intake has settled a second message
// of the held call id, then checks the held call is still pending and its
// caller unanswered.
func (f *fleet) heldCallUntouched(id string) {
	f.t.Helper()
	fleettest.WaitFor(f.t, 10*time.Second, "the second message taken in and settled", func() bool {
		c, err := f.JetStream().Consumer(context.Background(), layout.ApprovalsStream, approval.ConsumerName)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream >= 2
	})
	results, err := f.JetStream().Stream(f.t.Context(), layout.ResultsStream)
	if err != nil {
		f.t.Fatal(err)
	}
	if m, err := results.GetLastMsgForSubject(f.t.Context(), layout.ResultByCall(id)); err == nil {
		f.t.Errorf("the held call's caller was answered by another message: %.300s", m.Data)
	}
	if h, err := f.svc.Get(f.t.Context(), id); err != nil || h.Status != approval.StatusPending {
		f.t.Errorf("the held call: %+v, %v; want still held pending", h, err)
	}
}

// TestAMessageOverTheDefaultBoundDoesNotAnswerAHeldCall: a call of a
// tool the registry has no spec of, within the default bound, is held. A
// second message on the approvals subject with its id, more JSON values
// than the default bound and a deadline already past (any publisher on
// windlass.approval.* may send one) changes nothing of it (row 17): it is
// not answered expired for the held call's caller. (Found by a review
// helper.)
func TestAMessageOverTheDefaultBoundDoesNotAnswerAHeldCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	real := windlass.ToolCall{ID: "bulk-held", Name: "bulkpay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(`{"amounts":[1,2,3]}`)}
	f.publishApproval(real)
	if h := f.held(real.ID); h.Status != approval.StatusPending {
		t.Fatalf("the real call: %+v", h.Status)
	}

	forged := windlass.ToolCall{ID: real.ID, Name: "bulkpay", Deadline: time.Now().Add(-time.Second),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApprovalAs("bulkpay", forged, "forged-"+windlass.NewCallID())
	f.heldCallUntouched(real.ID)
}

// TestACallOfANonexistentToolOverTheDefaultBoundIsNotKeptPending: a
// message on the approvals subject naming a tool no worker advertises,
// with more JSON values than the default bound and no deadline, waits for
// its tool's bound at most a minute (here 2 s), not its approval window
// (an hour by default): while it waits it holds one of the intake
// consumer's unacknowledged places (1,000 by default), and a thousand of
// them would stop the approval service taking in any gated call. It is
// answered expired, and leaves nothing pending. (Found by a review
// helper.) Not parallel: it shortens the wait for the package.
func TestACallOfANonexistentToolOverTheDefaultBoundIsNotKeptPending(t *testing.T) {
	defer approval.SetUnknownToolWait(2 * time.Second)()
	f := newFleet(t, nil)
	call := windlass.ToolCall{ID: "no-such-tool-call", Name: "nosuchtool",
		Arguments: json.RawMessage(`{"xs":[` + strings.Repeat("0,", windlass.DefaultMaxArgumentValues) + `0]}`)}
	f.publishApproval(call)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, call.ID)
	if err != nil || r.Code() != windlass.CodeExpired || !strings.Contains(r.Content, "not in the registry") {
		t.Errorf("caller got %v %.300q, %v; want expired saying its tool was not in the registry", r.Code(), r.Content, err)
	}
	fleettest.WaitFor(t, 10*time.Second, "nothing pending on the intake's consumer", func() bool {
		c, err := f.JetStream().Consumer(context.Background(), layout.ApprovalsStream, approval.ConsumerName)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// TestACallOverTheDefaultBoundOutlivingARedisOutageIsNotExpiredAtOnce: a
// gated call over the default bound published while Redis is down (the
// dispatcher routes from its view meanwhile) waits for its tool's bound.
// Redis comes back without the tool's keys (restarted empty: here the
// tool was simply never there), and its workers advertise again within a
// heartbeat. The call must get that heartbeat: it is not answered expired
// on its first delivery after Redis answers just because it was published
// longer than unknownToolWait ago, while the registry could not be read at
// all. Not parallel: it shortens the wait for the package.
func TestACallOverTheDefaultBoundOutlivingARedisOutageIsNotExpiredAtOnce(t *testing.T) {
	// Stands in for the minute. The wait counts from the end of the last
	// lookup that failed, which can be well before Redis answers again: a
	// lookup against a Redis that refuses connections fails only after
	// the client's retries (some 3.5 s), and the next begins 2 s after
	// (the delivery's delay). Then one delivery after Redis is back, the
	// worker's advertisement and one more delivery (2 s each) must fit.
	const wait = 15 * time.Second
	defer approval.SetUnknownToolWait(wait)()
	f := newFleet(t, nil)
	consumer := f.intakeConsumer
	fleettest.WaitFor(t, 10*time.Second, "the intake's consumer", func() bool { return consumer() != nil })
	delivered := func() uint64 { return consumer().Delivered.Consumer }
	before := delivered()

	f.Redis.Kill()
	call := windlass.ToolCall{ID: "bulk-outage", Name: "bulkpay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	published := time.Now()
	f.publishApproval(call)
	// The outage itself, longer than the wait: the intake delivers the
	// call every 2 s meanwhile, the registry unreachable.
	fleettest.WaitFor(t, 30*time.Second, "the outage past the wait", func() bool {
		return delivered() >= before+2 && time.Since(published) > wait+time.Second
	})
	f.Redis.Restart(t)
	back := delivered()
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	answered := func() bool {
		_, err := results.GetLastMsgForSubject(context.Background(), layout.ResultByCall(call.ID))
		return err == nil
	}
	// A delivery that began after Redis came back (one counted in back
	// may have been under way, its lookup waiting for Redis): the registry
	// answered "not found" at least once, well within a heartbeat of Redis
	// coming back.
	fleettest.WaitFor(t, 15*time.Second, "the call delivered after Redis came back", func() bool {
		return answered() || delivered() >= back+1
	})
	if m, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(call.ID)); err == nil {
		t.Fatalf("answered %s after it was published, on a delivery right after Redis came back, before its tool's workers could advertise again: %.300s",
			time.Since(published), m.Data)
	}

	// Its worker advertises again: held.
	f.StartWorker(worker.Config{}, bulkPay())
	if h := f.held(call.ID); h.Status != approval.StatusPending {
		t.Errorf("held as %+v; want pending", h.Status)
	}
}

// TestAMessageOverItsToolsBoundDoesNotAnswerAHeldCall: the sibling of
// TestAMessageOverTheDefaultBoundDoesNotAnswerAHeldCall with the tool's
// bound known. A held call, then a second message on the approvals
// subject with its id and more JSON values than the tool takes (any
// publisher on windlass.approval.* may send one), or a malformed one (a
// body naming another tool): neither may answer the held call's caller
// (row 17: "a second message on the approvals subject with a held call's
// id changes nothing of it").
func TestAMessageOverItsToolsBoundDoesNotAnswerAHeldCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body func(id string) windlass.ToolCall
	}{
		{"over the tool's bound", func(id string) windlass.ToolCall {
			return windlass.ToolCall{ID: id, Name: "pay", Deadline: time.Now().Add(time.Hour),
				Arguments: json.RawMessage(`{"to":"x","amount":1,"xs":[` + strings.Repeat("0,", windlass.DefaultMaxArgumentValues) + `0]}`)}
		}},
		{"malformed", func(id string) windlass.ToolCall {
			return windlass.ToolCall{ID: id, Name: "notpay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{}`)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, nil)
			id := f.submit(payArgs{To: "bob", Amount: 5})
			f.held(id)
			f.publishApprovalAs("pay", tc.body(id), "second-"+windlass.NewCallID())
			f.heldCallUntouched(id)
		})
	}
}

// TestAnotherToolsFailingLookupsDoNotKeepAnUnknownToolsCallPending: a
// message of a tool the registry does not list, over the default bound,
// waits at most unknownToolWait (here 2 s) counted from its publication or
// from the registry's last failure to answer — for its own tool. Another
// tool whose registry entry cannot be read (here its spec undecodable; in
// production a Redis Cluster slot down, say), with a call of its own over
// the default bound delivered again every 2 s, fails a lookup every 2 s:
// that must not keep pushing the unknown tool's wait on, or every junk
// message waits its whole approval window (an hour by default) holding
// one of the intake consumer's unacknowledged places, the very thing the
// minute's bound is for. (Found by a review helper.) Not parallel: it
// shortens the wait for the package.
func TestAnotherToolsFailingLookupsDoNotKeepAnUnknownToolsCallPending(t *testing.T) {
	defer approval.SetUnknownToolWait(2 * time.Second)()
	f := newFleet(t, nil)
	// A tool whose registry entry cannot be read: every lookup of it fails
	// with an error other than "not found".
	if err := f.Redis.Client(t).HSet(t.Context(), "windlass:tool:{unreadable}", "spec", "{not json", "hash", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Registry().Lookup(t.Context(), "unreadable"); err == nil || errors.Is(err, registry.ErrToolNotFound) {
		t.Fatalf("the unreadable tool's lookup: %v; want an error other than not found", err)
	}
	many := json.RawMessage(`{"xs":[` + strings.Repeat("0,", windlass.DefaultMaxArgumentValues) + `0]}`)
	// Its call waits for its tool's bound (its window, an hour), failing a
	// lookup on each delivery.
	f.publishApproval(windlass.ToolCall{ID: "unreadable-call", Name: "unreadable", Arguments: many})
	consumer := f.intakeConsumer
	fleettest.WaitFor(t, 10*time.Second, "the unreadable tool's call delivered again", func() bool {
		info := consumer()
		return info != nil && info.Delivered.Consumer >= 2
	})

	junk := windlass.ToolCall{ID: "no-such-tool-junk", Name: "nosuchtool", Arguments: many}
	published := time.Now()
	f.publishApproval(junk)
	// 2 s from its publication, a delivery every 2 s: answered within a
	// few seconds, with room for a loaded machine.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, junk.ID)
	if err != nil {
		info := consumer()
		t.Fatalf("the unknown tool's call, past its 2 s wait, is still unanswered %s after it was published (%v; %d deliveries on the consumer in all, %d unacknowledged): another tool's failing lookups keep pushing its wait on",
			time.Since(published).Round(time.Second), err, info.Delivered.Consumer, info.NumAckPending)
	}
	if r.Code() != windlass.CodeExpired || !strings.Contains(r.Content, "not in the registry") {
		t.Errorf("caller got %v %.300q; want expired saying its tool was not in the registry", r.Code(), r.Content)
	}
}

// TestAMessageOfAnIDWaitingForItsBoundDoesNotAnswerIt: a gated call over
// the default bound whose tool the registry does not list yet (Redis
// restarted empty, its workers not advertised again) is neither held nor
// refused: it waits for its tool's bound (awaitBound). Meanwhile a second
// message on the approvals subject with its id, malformed (a body naming
// another tool; any publisher on windlass.approval.* may send one), is
// refused without answering the id, and one of other arguments within
// the bound is not held in the real call's place: the id is the waiting
// message's (store.claim). Once its tool advertises, the real call
// is held, with its own arguments. (Found by a review helper: the
// malformed message answered the real call's caller invalid_call.)
func TestAMessageOfAnIDWaitingForItsBoundDoesNotAnswerIt(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	real := windlass.ToolCall{ID: "bulk-awaiting", Name: "bulkpay", Deadline: time.Now().Add(time.Hour),
		Arguments: json.RawMessage(`{"amounts":[` + strings.Repeat("1,", windlass.DefaultMaxArgumentValues) + `1]}`)}
	f.publishApproval(real)
	fleettest.WaitFor(t, 15*time.Second, "the real call delivered again, waiting for its bound", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.Delivered.Consumer >= 2
	})

	forged := windlass.ToolCall{ID: real.ID, Name: "notbulkpay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{}`)}
	f.publishApprovalAs("bulkpay", forged, "forged-"+windlass.NewCallID())
	small := windlass.ToolCall{ID: real.ID, Name: "bulkpay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{"amounts":[1000000]}`)}
	f.publishApprovalAs("bulkpay", small, "small-"+windlass.NewCallID())
	// The forged messages settled: delivered, only the real call left
	// unacknowledged (delivered again every 2 s).
	fleettest.WaitFor(t, 15*time.Second, "the forged messages taken in and settled", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.Delivered.Stream >= 3 && info.NumPending == 0 && info.NumAckPending == 1
	})
	if h, err := f.svc.Get(t.Context(), real.ID); err == nil {
		t.Errorf("a message of other arguments was held in the waiting call's place: %+v", h.Status)
	}
	results, err := f.JetStream().Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(real.ID)); err == nil {
		t.Errorf("the caller of a call waiting for its tool's bound was answered by another message of its id: %.300s", m.Data)
	}

	f.StartWorker(worker.Config{}, bulkPay())
	want, err := release.ArgumentsHash(real.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	if h := f.held(real.ID); h.Status != approval.StatusPending || h.ArgsHash != want {
		t.Errorf("the real call held as %+v with arguments' hash %s; want pending with its own, %s", h.Status, h.ArgsHash, want)
	}
}

// TestARefusalRacingAHoldOfItsIDLeavesOneOutcome: a message on the
// approvals subject with a call's id that the intake refuses (here it
// names another tool than its subject's) is taken in beside the call's
// real message, and the real one is held between the refusal's check of
// the id and its answer — two replicas, or two of one replica's
// concurrent intakes. The id ends either held, its caller unanswered, or
// answered and not held; never both. Before, the refusal's check ("no call
// of this id is held") and its answer were two steps: the call was held
// and its caller told invalid_call, and the approvers were shown a call
// whose release would be refused. The hook stands in for the timing,
// which no real server shows on cue.
func TestARefusalRacingAHoldOfItsIDLeavesOneOutcome(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := "raced-" + windlass.NewCallID()
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	approval.SetBeforeRefusalAnswer(f.svc, func(got string) {
		if got != id {
			return
		}
		once.Do(func() { close(entered) })
		select {
		case <-proceed:
		case <-f.t.Context().Done():
		}
	})

	refused := windlass.ToolCall{ID: id, Name: "bulkpay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{"amounts":[1]}`)}
	f.publishApprovalAs("pay", refused, "refused-"+windlass.NewCallID())
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the refused message never reached its answer")
	}
	real := windlass.ToolCall{ID: id, Name: "pay", Deadline: time.Now().Add(time.Hour), Arguments: json.RawMessage(`{"to":"bob","amount":5}`)}
	f.publishApproval(real)
	fleettest.WaitFor(t, 10*time.Second, "the real message settled while the refusal waits", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.NumPending == 0 && info.NumAckPending == 1 && info.Delivered.Stream >= 2
	})
	close(proceed)
	fleettest.WaitFor(t, 10*time.Second, "the refused message settled", func() bool {
		info := f.intakeConsumer()
		return info != nil && info.NumPending == 0 && info.NumAckPending == 0
	})

	f.heldOrAnswered(id)
}

// heldOrAnswered checks that the call id ended in one outcome: held, its
// caller unanswered, or answered and not held.
func (f *fleet) heldOrAnswered(id string) {
	f.t.Helper()
	results, err := f.JetStream().Stream(f.t.Context(), layout.ResultsStream)
	if err != nil {
		f.t.Fatal(err)
	}
	answer, err := results.GetLastMsgForSubject(f.t.Context(), layout.ResultByCall(id))
	answered := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		f.t.Fatal(err)
	}
	h, err := f.svc.Get(f.t.Context(), id)
	held := err == nil
	switch {
	case held && answered:
		f.t.Errorf("the call is held (%s) and its caller answered: %.300s", h.Status, answer.Data)
	case !held && !answered:
		f.t.Errorf("the call is neither held nor answered")
	}
}
