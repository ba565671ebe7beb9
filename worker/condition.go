package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/retry"
)

// admitUnreleased decides whether a message without a release, on the
// subject of a tool with an approval condition, may run without one. It
// may when it is a call of this tool whose arguments (fetched first when
// they come by reference) are below the condition, and whose id is not a
// call held for approval. Otherwise it is dropped, unanswered, like any
// unreleased message on a gated tool's subject (see the top of gated.go):
// a call that meets the condition, or that the condition has no answer on
// (fail closed), was sent past the approval service; and answering a
// message that reuses a held call's id — even a harmless one — would tell
// that call's caller what its publisher chose.
func (w *Worker) admitUnreleased(d *delivery) (outcome, bool) {
	call, t := d.call, d.t
	if call.Name != t.spec.Name {
		return dropped(release.ReasonOtherCall, fmt.Sprintf("the call names tool %q but arrived on the subject of %q", call.Name, t.spec.Name)), true
	}
	if call.ArgumentsRef != nil {
		if _, err := w.loadArguments(d); err != nil {
			var tooLarge *payload.TooLargeError
			if !errors.As(err, &tooLarge) && !errors.Is(err, payload.ErrUnreadable) {
				return handedBack("cannot fetch the call's arguments to evaluate its approval condition", err), true
			}
			return dropped(release.ReasonNoRelease, fmt.Sprintf("the call carries no release and its arguments by reference cannot be read to evaluate the tool's approval condition (fail closed): %v", err)), true
		}
	}
	needs, err := t.spec.NeedsApproval(d.call.Arguments)
	switch {
	case err != nil:
		return dropped(release.ReasonNoRelease, fmt.Sprintf("the call carries no release and the tool's approval condition has no answer on its arguments (fail closed): %v", err)), true
	case needs:
		return dropped(release.ReasonNoRelease, "the call meets the tool's approval condition and carries no release: only the approval service may send it, once approved"), true
	}
	held, err := w.heldForApproval(d.ctx, call.ID)
	switch {
	case err != nil:
		return handedBack("cannot tell whether the call's id is held for approval", err), true
	case held:
		return dropped(release.ReasonNoRelease, fmt.Sprintf("the call's id %q is a call sent for approval (it has a queued event); it runs only with its release", call.ID)), true
	}
	return outcome{}, false
}

// heldForApproval reports whether callID is a call a dispatcher sent to the
// approval service: such a call has a queued event, which a dispatcher
// stores for gated calls only (PROTOCOL.md, "Events"). An error
// when the events stream cannot say now.
func (w *Worker) heldForApproval(ctx context.Context, callID string) (bool, error) {
	getCtx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	_, err := w.eventsStream.GetLastMsgForSubject(getCtx, layout.EventSubject(callID, string(windlass.EventQueued)))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("worker: read the queued event of %q: %w", callID, err)
	}
	return true, nil
}
