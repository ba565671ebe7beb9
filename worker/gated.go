package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/streamread"
	"github.com/windlass-dev/windlass/internal/wirejson"
)

// A message on a gated tool's call subject is the approval service's
// release of a call — or somebody else's word. Until the worker has proved
// it is the release, and the one message entitled to use it, nothing about
// it may reach a caller: a "rejected" answered under its call id would be
// the publisher's choice of what the real caller of that id is told (the
// first stored result wins), while the real call, still held or about to
// be released, runs. So a message that fails is dropped — terminated,
// recorded for operators, never answered — and every answer a gated call
// gets from a worker comes from the message that holds its release.
//
// A tool with an approval condition (Spec.ApprovalCondition) is gated for
// the calls the condition holds for: its subject carries both the
// approval service's releases and the dispatchers' calls below the
// condition. A message with a release is judged as above; one without is
// judged by admitUnreleased (condition.go), which drops it — by the same
// rule — unless it is a call below the condition that no one holds for
// approval.

// admitGated decides whether a message on a gated tool's subject may go
// on: it is dropped when it is not the release's rightful message, handed
// back for later when the ledger or the results stream cannot say now, and
// acked unrun when its call has its answer. When it may go on, the call
// becomes what the release signs: its deadline is the release's expiry and
// its result goes to the origin the release names, whatever the message's
// body and headers say. A call of an ungated tool passes; so does a call
// below its tool's approval condition (see admitUnreleased). A released
// call runs with its release whether or not its arguments, perhaps edited
// by its reviewer, still meet the condition.
func (w *Worker) admitGated(d *delivery) (outcome, bool) {
	call, t := d.call, d.t
	if !t.spec.Gated() {
		return outcome{}, false
	}
	if !t.spec.RequiresApproval && d.msg.Headers().Get(release.Header) == "" {
		return w.admitUnreleased(d)
	}
	if call.Name != t.spec.Name {
		return dropped(release.ReasonOtherCall, fmt.Sprintf("the call names tool %q but arrived on the subject of %q", call.Name, t.spec.Name)), true
	}
	// Arguments by reference are fetched once the release is proven
	// genuine, to check they are the ones it approved.
	var fetchErr error
	rel, err := w.releases.AuthenticateWithin(d.msg.Headers().Get(release.Header), call, t.boundFor, func() (json.RawMessage, error) {
		if call.ArgumentsRef == nil {
			return call.Arguments, nil
		}
		args, err := w.loadArguments(d)
		fetchErr = err
		return args, err
	})
	if fetchErr != nil {
		// A genuine release whose arguments cannot be had: its caller is
		// answered where the release says.
		if validOrigin(rel.Origin) {
			d.origin = rel.Origin
		}
		d.rel, d.releaseID = &rel, releaseID(d.msg.Headers().Get(release.Header)) // its answer frees its slot, with a receipt
		return w.unfetched(d, fetchErr), true
	}
	if err != nil {
		return dropped(release.ReasonOf(err), err.Error()), true
	}
	fresh, o, stop := w.claimRelease(d, rel)
	if stop {
		return o, true
	}
	if o, stop := w.unanswered(d, rel, fresh); stop {
		return o, true
	}
	d.call.Deadline = rel.ExpiresAt
	d.rel, d.releaseID = &rel, releaseID(d.msg.Headers().Get(release.Header))
	if rel.SpecHash != "" {
		d.call.SpecHash = rel.SpecHash
	}
	if validOrigin(rel.Origin) {
		d.origin = rel.Origin
	}
	d.released = true
	d.logger().DebugContext(d.ctx, "worker: release verified", "approved_by", rel.ApprovedBy, "first_use", fresh)
	return outcome{}, false
}

// claimRelease records this message as the release's user in the ledger;
// fresh reports that no message had used it before. The ledger must
// answer: while it cannot, the worker asks again in place, the heartbeat
// keeping the message (a hand-back would count as a delivery, and five of
// them would bury a genuine call as worker_lost), until the release
// expires.
func (w *Worker) claimRelease(d *delivery, rel release.Release) (fresh bool, o outcome, stop bool) {
	const what = "cannot check the release ledger now"
	err := w.untilAnswered(d, rel.ExpiresAt, what, func(ctx context.Context) error {
		var err error
		fresh, err = w.ledger.Claim(ctx, d.call.ID, d.meta.Sequence.Stream, rel.ExpiresAt)
		return err
	})
	switch {
	case errors.Is(err, release.ErrInvalid):
		return false, dropped(release.ReasonOf(err), err.Error()), true
	case err != nil:
		return false, handedBack(what, err), true
	}
	return fresh, outcome{}, false
}

// unanswered lets a released call go on only when it has no answer yet, as
// the results stream's leader says, on every delivery: a gated call never
// runs on a guess.
func (w *Worker) unanswered(d *delivery, rel release.Release, fresh bool) (outcome, bool) {
	const what = "cannot tell whether the call was answered already"
	var stored windlass.ToolResult
	var answered bool
	err := w.untilAnswered(d, rel.ExpiresAt, what, func(ctx context.Context) error {
		var err error
		stored, answered, err = w.storedResult(ctx, d.call.ID)
		return err
	})
	if err == nil && !answered && !fresh {
		// A redelivery of this very message, perhaps of a worker that
		// still holds it after an outage (see reconnects).
		var o outcome
		var stop bool
		if answered, o, stop = w.answeredAfterReconnect(d, rel.ExpiresAt); stop {
			return o, true
		}
	}
	switch {
	case err != nil:
		return handedBack(what, err), true
	case !answered:
		return outcome{}, false
	case !fresh:
		// This very message ran; its worker answered, then was lost
		// before its ack landed (perhaps before it freed the call's
		// slot: freed again, which does nothing if it was).
		d.rel = &rel
		w.freeSlotOf(d)
		return ackedUnrun(countAlreadyAnswered, "worker: redelivered call already answered; acking without running"), true
	case stored.Code() == windlass.CodeCanceled:
		// Canceled after its release, before a worker took it: the
		// canceler answered the caller.
		return ackedUnrun(countCanceled, "worker: released call was canceled before it started; acking without running"), true
	default:
		// The first use of a release whose call has its answer: a copy of
		// a message that ran, replayed after the ledger lost its claim.
		return dropped(release.ReasonAnswered, "the call already has its result; a released call runs once"), true
	}
}

// untilAnswered calls ask until it returns nil or a refusal (wrapping
// release.ErrInvalid), retrying any other error until until (the release's
// expiry, or the call's deadline: past it the call cannot run anyway; zero:
// no bound) or the worker's shutdown, the heartbeat keeping the message
// meanwhile. It returns ask's last error.
func (w *Worker) untilAnswered(d *delivery, until time.Time, what string, ask func(context.Context) error) error {
	err := ask(d.ctx)
	if err == nil || errors.Is(err, release.ErrInvalid) {
		return err // the usual case
	}
	d.logger().WarnContext(d.ctx, "worker: "+what+"; asking again", "error", err)
	ctx, cancel := d.ctx, context.CancelFunc(func() {})
	if !until.IsZero() {
		ctx, cancel = context.WithDeadline(d.ctx, until)
	}
	defer cancel()
	return retry.Do(ctx, retry.Policy{Initial: gatedRetryInterval}, func(ctx context.Context) error {
		err := ask(ctx)
		if errors.Is(err, release.ErrInvalid) {
			return retry.Permanent(err)
		}
		return err
	})
}

// gatedRetryInterval is the first wait before a gated call's release is
// checked again, and the delay of a hand-back.
const gatedRetryInterval = 100 * time.Millisecond

// handedBack is the outcome of a call handed back for a later delivery,
// unanswered: what it needs to be judged stayed unreachable until its
// release expired, or the worker is shutting down.
func handedBack(why string, err error) outcome {
	return outcome{verb: verbRequeue, delay: gatedRetryInterval, count: countRequeued,
		note: "worker: " + why + "; handing the call back", level: slog.LevelWarn, attrs: []any{"error", err}}
}

// storedResult reads the call's result from the results stream, as the
// stream's leader says; an error when it cannot tell.
func (w *Worker) storedResult(ctx context.Context, callID string) (windlass.ToolResult, bool, error) {
	data, err := streamread.First(ctx, w.cfg.JetStream.Conn(), w.resultsStream, layout.ResultByCall(callID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return windlass.ToolResult{}, false, nil
	case err != nil:
		return windlass.ToolResult{}, false, err
	}
	var r windlass.ToolResult
	_ = wirejson.Decode(data, &r) // a result that does not decode is a result all the same
	return r, true, nil
}

// boundFor is the bound on the JSON values of the arguments a release
// approved: the tool's own when the release was signed for the spec this
// worker serves, or for none (a call published without a spec hash, held
// under this tool's bound too); for another spec, whose bound this worker
// cannot tell, the larger of its own and the default — finite, so that a
// release seen once cannot make the worker hash whatever a message holds.
func (t *registered) boundFor(r release.Release) int {
	own := t.spec.ArgumentValueLimit()
	if r.SpecHash == "" || r.SpecHash == t.hash {
		return own
	}
	return max(own, windlass.DefaultMaxArgumentValues)
}
