package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/wirejson"
)

// delivery is one delivered call message and what handling it holds. The
// guards fill in what they learn (the metadata, the call, its heartbeat,
// its place in the cancellations); end releases it all.
type delivery struct {
	ctx     context.Context // the call's: its consumer span, for settling and logs
	stopped context.Context // ends once the worker has stopped pulling: a call waiting for its turn is handed back
	msg     jetstream.Msg
	t       *registered
	baseLog *slog.Logger // the worker's; see logger
	named   bool         // decode has read the call: its logs name it
	callLog atomic.Pointer[slog.Logger]
	origin  string // where the answer goes
	free    func() // gives back the call's slot: once its tool is done with it
	freed   bool
	done    func() // once the message is settled or handed back

	meta  *jetstream.MsgMetadata
	holds bool // this delivery holds its message for the worker (see heldMessages)
	call  windlass.ToolCall
	hb    *heartbeat // from the call's decoding until the message is settled

	argsRef  *windlass.PayloadRef    // where the call's arguments came from, when by reference
	released bool                    // admitGated verified the call's release, and found it unanswered
	token    string                  // the call's subject token, its key in the cancellations
	callCtx  context.Context         // the tool's, canceled by a cancellation or the shutdown grace
	cancel   context.CancelCauseFunc // of callCtx

	rel        *release.Release // the release the call runs under, once verified
	releaseID  string           // the release's id in receipts
	finishedAt time.Time        // when the tool returned
}

// logger is the logger of the call's logs: the worker's, with the call's
// id, tool and attempt once decode has read them. It is built the first
// time the call logs, as most calls log nothing: building it for every
// call cost about 1 µs and five allocations a call (a CPU and allocation
// profile of BenchmarkFleetCallNoLimits). Safe for concurrent use.
func (d *delivery) logger() *slog.Logger {
	if !d.named {
		return d.baseLog
	}
	if l := d.callLog.Load(); l != nil {
		return l
	}
	d.callLog.CompareAndSwap(nil, d.baseLog.With("call_id", d.call.ID, "tool", d.call.Name, "attempt", d.call.Attempt))
	return d.callLog.Load()
}

// freeSlot gives back the call's slot (at most once): its tool no longer
// runs, though its answer may still be on its way.
func (d *delivery) freeSlot() {
	if !d.freed && d.free != nil {
		d.freed = true
		d.free()
	}
}

// end releases what the call holds, once its message is settled or handed
// back: its place in the cancellations, its context, its heartbeat, its
// slot, and then done. A message left unsettled (for redelivery) is no
// longer held either.
func (d *delivery) end(w *Worker) {
	d.forget(w)
	if d.hb != nil {
		d.hb.stop()
	}
	d.freeSlot()
	d.done()
}

// forget takes the call out of the worker's cancellations (its context
// ends) and then gives up the worker's hold of its message, once: a
// redelivery taken in once the hold is gone finds the cancellations
// without this delivery's entry, which it would otherwise replace and
// this delivery's end remove.
func (d *delivery) forget(w *Worker) {
	if d.cancel != nil { // entered in the cancellations by canceledBefore
		w.cancels.finish(d.token)
		d.cancel(nil)
		d.cancel = nil
	}
	d.letGo(w)
}

// guard is one intake check: it stops the call with an outcome, or lets it
// go on to the next check.
type guard func(*delivery) (o outcome, stop bool)

// intakeGuards lists the intake's checks in the order they run; New sets
// w.guards from it once, so no call builds the list again.
func (w *Worker) intakeGuards() []guard {
	return []guard{w.decode, w.heldHere, w.admitGated, w.alreadyAnswered, w.outOfDeliveries, w.refuse, w.canceledBefore, w.fetchArguments}
}

// intake runs the guards in order, each of them once the earlier ones have
// passed, and returns the first outcome that stops the call; ok when every
// guard passed and the call may run.
func (w *Worker) intake(d *delivery) (outcome, bool) {
	for _, g := range w.guards {
		if o, stop := g(d); stop {
			return o, false
		}
	}
	return outcome{}, true
}

// decode reads the message's metadata and call, and starts the call's
// heartbeat. A message without metadata is terminated; a malformed call is
// answered invalid_call when its id can be read, and terminated — on a
// gated tool's subject it is dropped instead: it is not the approval
// service's release of any call, so nothing may answer it.
func (w *Worker) decode(d *delivery) (outcome, bool) {
	meta, err := d.msg.Metadata()
	if err != nil {
		return outcome{verb: verbTerm, note: "worker: message without JetStream metadata; terminating", level: slog.LevelError,
			attrs: []any{"tool", d.t.spec.Name, "error", err}}, true
	}
	d.meta = meta
	if err := wirejson.Decode(d.msg.Data(), &d.call); err != nil || d.call.Validate() != nil {
		if err == nil {
			err = d.call.Validate()
		}
		return w.malformed(d, err), true
	}
	d.call.Attempt = int(meta.NumDelivered)
	d.token = layout.CallToken(d.call.ID)
	if !layout.OnItsSubject(d.msg.Subject(), d.t.spec.Name, d.token) {
		// Not this id's subject: a forgery, or a client that does not
		// follow the protocol. Answering it would answer the call the id
		// names, which may be another's.
		return dropped(release.ReasonMalformed, fmt.Sprintf("the call's id %q does not match the subject it arrived on (%s): each call has its own subject, windlass.call.<tool>.<call token>", d.call.ID, d.msg.Subject())), true
	}
	identify(d.ctx, d.call)
	d.named = true
	// One heartbeat from delivery until the message is settled, which
	// includes publishing the result.
	d.hb = w.startHeartbeat(d.msg, d.call)
	return outcome{}, false
}

// malformed is the outcome of a message whose call does not decode.
func (w *Worker) malformed(d *delivery, err error) outcome {
	id := readableID(d.msg.Data())
	d.call = windlass.ToolCall{ID: id, Name: d.t.spec.Name}
	if d.t.spec.Gated() {
		return dropped(release.ReasonMalformed, "the call message is malformed: "+err.Error())
	}
	o := outcome{verb: verbTerm, count: countMalformed, note: "worker: malformed call; terminating it", level: slog.LevelWarn,
		attrs: []any{"tool", d.t.spec.Name, "call_id", id, "error", err}}
	if id != "" {
		o.answer, o.answers = windlass.ErrorResult(d.call, windlass.CodeInvalidCall, fmt.Sprintf("The call message is malformed: %v", err)), true
	}
	return o
}

// dropped is the outcome of a message dropped for reason.
func dropped(reason release.Reason, detail string) outcome {
	return outcome{verb: verbDrop, reason: reason, detail: detail, count: countRefused}
}

// alreadyAnswered acks, without running it, a redelivered call of an
// ungated tool that has its result: its earlier worker published the result
// but was lost (or paused past the ack wait) before its ack landed; the
// caller has its answer, and running the call again would only repeat its
// effects. It goes before the deliveries' bound: an answered call is not
// dead, however many deliveries it took. (A gated call was looked up by
// admitGated.)
//
// When the results stream cannot be read, the worker asks again in place,
// the heartbeat keeping the message, until the call's deadline: a
// redelivery is what a lost ack leaves, so its answer may well be stored,
// and a tool must not run again because a read failed after it answered.
// Nor is the call handed back meanwhile: each hand-back is a delivery, and
// MaxDeliver of them would bury as worker_lost a call no worker lost. Past
// the deadline it goes on to the guards after, which answer it timeout
// without running it (an answer stored before stays the call's: the first
// wins); a call without a deadline is asked about until shutdown, when it
// is handed back, as is any.
//
// A redelivery without an answer that comes soon after the worker's own
// reconnect may be of a call another worker still holds, its in-progress
// acks cut off by the same outage: its answer is looked for a little
// longer before the call runs again (see reconnects), and a holder that
// says it still holds the message is left the call (see heldElsewhere).
func (w *Worker) alreadyAnswered(d *delivery) (outcome, bool) {
	if d.released || d.call.Attempt == 1 {
		return outcome{}, false
	}
	const what = "cannot tell whether the redelivered call was answered"
	var answered bool
	err := w.untilAnswered(d, d.call.Deadline, what, func(ctx context.Context) error { // no deadline: until shutdown
		var err error
		_, answered, err = w.storedResult(ctx, d.call.ID)
		return err
	})
	switch {
	case err != nil && d.ctx.Err() != nil:
		return handedBack(what, err), true
	case err != nil:
		return outcome{}, false // past its deadline: answered timeout, not run (refuse)
	case !answered:
		settled, o, stop := w.answeredAfterReconnect(d, d.call.Deadline)
		switch {
		case stop:
			return o, true
		case !settled:
			return outcome{}, false
		}
	}
	w.freeSlotOf(d) // its earlier worker may have been lost before it freed the slot
	return ackedUnrun(countAlreadyAnswered, "worker: redelivered call already answered; acking without running"), true
}

// unreadRetryDelay is the wait before a call handed back because what it
// needs could not be read is delivered again.
const unreadRetryDelay = time.Second

// ackedUnrun is the outcome of a call acked without running or answering:
// its answer is stored already.
func ackedUnrun(c counter, note string) outcome {
	return outcome{verb: verbAck, count: c, note: note, level: slog.LevelInfo}
}

// outOfDeliveries buries a call delivered more often than Config.MaxDeliver
// allows: every earlier delivery was lost with its worker, so it does not
// risk a worker on it again. It is answered worker_lost, with the last
// retryable error it had if any, recorded as dead, and terminated so it
// does not stay in the work queue.
func (w *Worker) outOfDeliveries(d *delivery) (outcome, bool) {
	call := d.call
	if call.Attempt <= w.cfg.MaxDeliver {
		return outcome{}, false
	}
	lost := call.Attempt - 1
	text := fmt.Sprintf("The call to %q was lost: it was delivered %d times and each worker that took it stopped answering (crashed, killed or cut off) before it finished. It was not run again; see the dead calls to replay it.", call.Name, lost)
	if last, ok := w.lastRetryError(d.ctx, call.ID); ok {
		text += " Its last error was: " + last.Message
	}
	r := windlass.ErrorResult(call, windlass.CodeWorkerLost, text)
	r.Worker = w.cfg.ID
	o := answered(verbTerm, r)
	o.dead, o.deliveries = r.Error, lost
	o.note, o.level, o.attrs = "worker: call ran out of deliveries; answering worker_lost", slog.LevelWarn, []any{"deliveries", lost}
	return o, true
}

// lastRetryError reads the error of the call's latest retrying event.
func (w *Worker) lastRetryError(ctx context.Context, callID string) (windlass.CallError, bool) {
	getCtx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	m, err := w.eventsStream.GetLastMsgForSubject(getCtx, layout.EventSubject(callID, string(windlass.EventRetrying)))
	if err != nil {
		return windlass.CallError{}, false
	}
	var e windlass.Event
	if json.Unmarshal(m.Data, &e) != nil || e.Error == nil {
		return windlass.CallError{}, false
	}
	return *e.Error, true
}

// refuse answers, without running the tool, a call that must not run. A
// gated call comes here only once admitGated proved it the rightful
// message of its release, whose expiry is the call's deadline by then.
func (w *Worker) refuse(d *delivery) (outcome, bool) {
	call, t, now := d.call, d.t, time.Now()
	var r windlass.ToolResult
	switch {
	case call.Name != t.spec.Name:
		r = windlass.ErrorResult(call, windlass.CodeInvalidCall,
			fmt.Sprintf("The call names tool %q but arrived on the subject of %q.", call.Name, t.spec.Name))
	case !call.Deadline.IsZero() && !now.Before(call.Deadline):
		r = windlass.ErrorResult(call, windlass.CodeTimeout,
			fmt.Sprintf("Tool %q timed out: the call's deadline passed %s before a worker took it.", call.Name, now.Sub(call.Deadline).Round(time.Millisecond)))
	case t.cfg.maxQueueWait > 0 && call.Attempt == 1 && now.Sub(d.meta.Timestamp) > t.cfg.maxQueueWait:
		// Schedule-to-start: only the first delivery waited in the queue.
		// A later one follows a retry's backoff or a lost worker, and the
		// message's timestamp is still its first publish.
		r = windlass.ErrorResult(call, windlass.CodeTimeout,
			fmt.Sprintf("Tool %q timed out: the call waited %s in the queue, longer than its bound of %s.", call.Name, now.Sub(d.meta.Timestamp).Round(time.Millisecond), t.cfg.maxQueueWait))
	case call.SpecHash != "" && call.SpecHash != t.hash:
		r = windlass.ErrorResult(call, windlass.CodeSpecMismatch,
			fmt.Sprintf("Tool %q changed: this worker serves schema %s but the call was made for schema %s. List the tools again and retry.", call.Name, t.hash, call.SpecHash))
	default:
		return outcome{}, false
	}
	return answered(verbAck, r), true
}

// canceledBefore enters the call in the worker's cancellations, which
// gives it the context its tool will run under, and answers it canceled
// when it was canceled before it started.
func (w *Worker) canceledBefore(d *delivery) (outcome, bool) {
	d.callCtx, d.cancel = context.WithCancelCause(d.ctx)
	rec, canceled := w.cancels.start(d.token, d.cancel)
	if !canceled && time.Since(d.meta.Timestamp) > cancelCheckAfter {
		rec, canceled = w.canceledWhileQueued(d)
	}
	if waited, keep := time.Since(d.meta.Timestamp), w.cancels.kept(); !canceled && d.call.Attempt == 1 && keep > 0 && waited > keep {
		// Its cancellation, had there been one, and the canceled answer
		// are gone from their streams (a deadline past their max age): it
		// cannot be known that its caller did not cancel it, so it is not
		// run. Only a first delivery: a later one was checked when its
		// first attempt started, and followed since (the message's time
		// is still its first publish).
		r := windlass.ErrorResult(d.call, windlass.CodeTimeout, fmt.Sprintf(
			"Tool %q timed out: the call waited %s in the queue, longer than the fleet keeps cancellations (%s), so whether it was canceled meanwhile cannot be known; it was not run.",
			d.call.Name, waited.Round(time.Second), keep))
		r.Worker = w.cfg.ID
		o := answered(verbAck, r)
		o.note, o.level = "worker: call waited longer than cancellations are kept; answering timeout without running it", slog.LevelWarn
		return o, true
	}
	if !canceled {
		return outcome{}, false
	}
	r := windlass.ResultFromError(d.call, windlass.CancelCause(rec.Reason))
	r.Worker = w.cfg.ID
	o := answered(verbAck, r)
	o.count, o.note, o.level = countCanceled, "worker: call was canceled before it started; answering canceled", slog.LevelInfo
	return o, true
}

// fetchArguments fetches the arguments of a call that carries them by
// reference (windlass.ToolCall.ArgumentsRef), last, once nothing else
// stops the call: the tool gets them decoded as usual, and validated
// against its schema in full. Arguments over the tool's limit are
// answered payload_too_large without being read; an object that is gone
// or not the reference's payload_unreadable, never used. When the object
// store cannot be read now, the call is handed back for a later delivery.
func (w *Worker) fetchArguments(d *delivery) (outcome, bool) {
	if d.call.ArgumentsRef == nil {
		return outcome{}, false
	}
	if _, err := w.loadArguments(d); err != nil {
		return w.unfetched(d, err), true
	}
	return outcome{}, false
}

// loadArguments fetches the arguments of a call that carries them by
// reference, up to the tool's limit, and puts them in the call.
func (w *Worker) loadArguments(d *delivery) (json.RawMessage, error) {
	ref := d.call.ArgumentsRef
	args, err := w.payloads.Get(d.ctx, *ref, w.payloadLimit(d.t))
	if err != nil {
		return nil, err
	}
	d.call.Arguments, d.call.ArgumentsRef, d.argsRef = args, nil, ref
	return args, nil
}

// unfetched is the outcome of a call whose arguments by reference could
// not be fetched (see fetchArguments).
func (w *Worker) unfetched(d *delivery, err error) outcome {
	var tooLarge *payload.TooLargeError
	var r windlass.ToolResult
	switch {
	case errors.As(err, &tooLarge):
		r = windlass.ErrorResult(d.call, windlass.CodePayloadTooLarge, fmt.Sprintf(
			"The arguments of the call to %q are %d bytes, over the tool's limit of %d bytes for arguments; they were not read.", d.call.Name, tooLarge.Size, tooLarge.Limit))
	case errors.Is(err, payload.ErrUnreadable):
		r = windlass.ErrorResult(d.call, windlass.CodePayloadUnreadable, fmt.Sprintf(
			"The arguments of the call to %q, stored by reference, cannot be used: %v. The tool did not run.", d.call.Name, err))
	default:
		return outcome{verb: verbRequeue, delay: unreadRetryDelay, count: countRequeued, note: "worker: could not fetch the call's arguments; handing it back", level: slog.LevelWarn,
			attrs: []any{"error", err}}
	}
	r.Worker = w.cfg.ID
	return answered(verbAck, r)
}

// payloadLimit is the limit by reference of a tool's arguments and value.
func (w *Worker) payloadLimit(t *registered) int64 {
	return cmp.Or(t.cfg.payloadLimit, w.cfg.PayloadLimit)
}

// cancelCheckAfter is the queue wait past which a call is looked up in the
// cancels stream itself before it starts, unless the follower of the
// stream knew it was caught up within this time (see
// cancellations.caughtUpRecently): both leave the same window.
// The follower may lag (a loaded machine); a call that waited a while may
// have been canceled meanwhile. A call pulled within this time of its
// publish is not looked up, which keeps the direct get off the fast path: a
// cancellation made in that instant reaches the tool as a canceled context
// instead.
const cancelCheckAfter = 20 * time.Millisecond

// canceledWhileQueued reports whether a call that waited in the queue
// over cancelCheckAfter was canceled meanwhile. The follower answers when
// it knew, within cancelCheckAfter, that it had applied every
// cancellation stored; otherwise the call waits for a probe of the stream
// — one that the calls in the same case share — and is looked up in the
// stream itself only if that does not prove it either. A proof half that
// old is renewed ahead, so that calls keep finding one while they come.
func (w *Worker) canceledWhileQueued(d *delivery) (windlass.Cancellation, bool) {
	c := w.cancels
	if c.caughtUpRecently(cancelCheckAfter) {
		if !c.caughtUpRecently(cancelCheckAfter / 2) {
			c.probeSoon()
		}
		return c.lookedUp(d.token)
	}
	probed := time.NewTimer(retry.ReadTimeout)
	select {
	case <-c.probeSoon():
		if c.caughtUpRecently(cancelCheckAfter) {
			probed.Stop()
			return c.lookedUp(d.token)
		}
	case <-probed.C:
	case <-d.ctx.Done():
	}
	probed.Stop()
	getCtx, stop := context.WithTimeout(d.ctx, retry.ReadTimeout)
	defer stop()
	return w.checkCancellation(getCtx, d.call.ID)
}

// checkCancellation looks a call up in the cancels stream and records what
// it finds, which also cancels the call if it runs here. When the stream
// cannot say, the call is taken as not canceled: the follower and the
// heartbeat still bring a cancellation to it.
func (w *Worker) checkCancellation(ctx context.Context, callID string) (windlass.Cancellation, bool) {
	if w.cancelsStream == nil {
		return windlass.Cancellation{}, false
	}
	rec, ok := w.readCancellation(ctx, callID)
	if ok {
		w.cancels.add(layout.CallToken(callID), rec)
	}
	return rec, ok
}

// readableID extracts a valid call id from a malformed message, or "".
func readableID(data []byte) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return ""
	}
	// "." and ".." were valid ids before they were refused as a URL's
	// dot-segments: a call an older dispatcher queued with one is
	// answered (its subject is the id's token), not left to time out.
	if windlass.ValidateCallID(probe.ID) != nil && probe.ID != "." && probe.ID != ".." {
		return ""
	}
	return probe.ID
}
