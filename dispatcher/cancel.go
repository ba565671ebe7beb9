package dispatcher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
)

// ErrUnknownCall is returned by [Dispatcher.Cancel] for a call id the
// fleet has no record of (never accepted, or past the retention window).
var ErrUnknownCall = errors.New("dispatcher: no such call")

// ErrCanceledUnanswered is wrapped by the error of [Dispatcher.Cancel]
// when the cancellation was stored but the canceled result, which answers
// the call's caller, could not be: the call is canceled all the same, and
// whoever holds it answers its caller canceled (a worker running it
// cancels its context, one that pulls it later does not run it, the
// approval service drops a held one). Unless the call finished first, its
// result will be canceled; [Dispatcher.Status] and [Dispatcher.Wait] tell
// when it is stored.
var ErrCanceledUnanswered = errors.New("dispatcher: canceled, but its canceled result is not stored yet")

// cancelRecordFor bounds the attempts to store a cancellation.
const cancelRecordFor = 10 * time.Second

// FinishedError is returned by [Dispatcher.Cancel] for a call that already
// has its result, which it carries.
type FinishedError struct {
	// Result is the call's result.
	Result windlass.ToolResult
}

// Error implements error.
func (e *FinishedError) Error() string {
	return fmt.Sprintf("dispatcher: call %q already finished (%s)", e.Result.CallID, cmp.Or(string(e.Result.Code()), "success"))
}

// Cancel cancels a call by id, from any dispatcher instance. The
// cancellation is stored durably first, so a worker that pulls the queued
// call later answers it canceled without running it, and a worker running it
// cancels its context (cause [windlass.ErrCallCanceled]). Then the caller is
// answered canceled at once, reason quoted; the tool's own answer, should it
// finish anyway, is dropped as the call's second result.
//
// A call that already has its result returns a *[FinishedError]; an id the
// fleet never accepted returns [ErrUnknownCall]; when the streams cannot
// say which (NATS down or restarting), the error wraps [ErrUnavailable]
// and nothing was canceled — or, its message saying so, the cancellation
// was sent and not confirmed, and may be stored: cancel again, which is
// the same cancellation. When the cancellation was stored but the
// canceled result could not be, the error wraps [ErrCanceledUnanswered]:
// the call is canceled, and answered by whoever holds it.
func (d *Dispatcher) Cancel(ctx context.Context, callID, reason string) error {
	if err := windlass.ValidateCallID(callID); err != nil {
		return fmt.Errorf("dispatcher: cancel: %w", err)
	}
	if d.closed.Load() {
		return ErrClosed
	}
	k, err := d.find(ctx, callID)
	switch {
	case err != nil:
		return fmt.Errorf("%w: cancel %q: %w", ErrUnavailable, callID, err)
	case k.result != nil:
		r, err := d.resolve(ctx, *k.result)
		if err != nil {
			return fmt.Errorf("cancel %q: %w", callID, err)
		}
		return &FinishedError{Result: r}
	case !k.found:
		return fmt.Errorf("%w: %q", ErrUnknownCall, callID)
	}
	data, err := json.Marshal(windlass.Cancellation{CallID: callID, Reason: reason, At: time.Now()})
	if err != nil {
		return fmt.Errorf("dispatcher: cancel %q: %w", callID, err)
	}
	// Sent again while unacknowledged (its message id makes a repeat
	// one cancellation), for a bounded time: a cancellation stored whose
	// acknowledgement was lost (a reply lost in a restart, a leader
	// change) is a cancellation, and its caller must not be told that
	// nothing was canceled.
	rctx, cancel := context.WithTimeout(ctx, cancelRecordFor)
	defer cancel()
	if _, _, err := d.publishDurably(rctx, &nats.Msg{Subject: layout.CancelSubject(callID), Data: data, Header: nats.Header{
		nats.MsgIdHdr: []string{layout.CancelMsgID(callID)}, layout.HeaderProtocol: []string{protocolVersion},
	}}); err != nil {
		if errors.Is(err, errUnconfirmed) {
			return fmt.Errorf("%w: cancel %q: the cancellation was sent and not confirmed, and may be stored: ask for the call's status, or cancel again, which is the same cancellation (a call it canceled meanwhile is finished, with its canceled result): %w", ErrUnavailable, callID, err)
		}
		return fmt.Errorf("dispatcher: cancel %q: record the cancellation: %w", callID, err)
	}
	// Answer the caller now. The results stream keeps one answer per call
	// id: if the tool's result was published in the meantime, this one is
	// dropped as a duplicate, and the first answer stands.
	r := windlass.ResultFromError(windlass.ToolCall{ID: callID, Name: k.rec.tool}, windlass.CancelCause(reason))
	res, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("dispatcher: cancel %q: %w", callID, err)
	}
	origin := k.rec.origin
	if windlass.ValidateName(origin) != nil {
		origin = "anonymous"
	}
	m := &nats.Msg{Subject: layout.ResultSubject(origin, callID), Data: res, Header: nats.Header{
		nats.MsgIdHdr: []string{layout.ResultMsgID(callID)}, layout.HeaderProtocol: []string{protocolVersion},
	}}
	layout.SetCallRecord(m.Header, k.rec.queuedAt, k.rec.deadline, k.rec.argsHash, k.rec.key)
	e := d.admission.enforcer
	ack, err := d.js.PublishMsg(ctx, m)
	if err == nil && e != nil {
		// Stored (or another answer was): the call's slot, if it holds
		// one, is free, whichever dispatcher admitted it.
		e.FreeCall(k.rec.tool, k.rec.key, callID)
	}
	if err != nil {
		// The cancellation is recorded: the worker that holds or pulls
		// the call answers it canceled.
		return fmt.Errorf("%w: cancel %q: answering its caller failed (its worker will): %w", ErrCanceledUnanswered, callID, err)
	}
	if ack.Duplicate {
		// Another answer came first, after the look-up above: this
		// cancellation's, from whoever follows the cancels stream (the
		// approval service for a held call, the worker for a queued one),
		// or the call's own: then it finished, and its answer stands.
		if r, err := d.Result(ctx, callID); err == nil && r.Code() != windlass.CodeCanceled {
			return &FinishedError{Result: r}
		}
	}
	return nil
}
