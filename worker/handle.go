package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/internal/textcut"
)

// decision is what settle does with a call's message.
type decision int

const (
	ack  decision = iota // result published: remove the call
	term                 // never redeliver (malformed); result published if possible
	nak                  // hand the call to another delivery
)

// stats counts what the worker did; read by tests and the status view.
type stats struct {
	completed, failed, malformed, requeued, retried, canceled, dead, alreadyAnswered, duplicateResults, refused atomic.Int64
}

// Stats is a snapshot of a worker's counters.
type Stats struct {
	// Completed calls answered with a success result.
	Completed int64
	// Failed calls answered with an error result.
	Failed int64
	// Malformed messages terminated.
	Malformed int64
	// Requeued calls handed back to the stream (shutdown; a gated call's
	// release ledger or result unreadable for now).
	Requeued int64
	// Retried attempts that failed with a retryable error and were handed
	// back for another attempt after a backoff.
	Retried int64
	// Canceled calls answered canceled (before or while running).
	Canceled int64
	// Dead calls recorded in the dead calls stream: deliveries or retries
	// ran out.
	Dead int64
	// AlreadyAnswered redeliveries acked without running because the call
	// already had its result (its earlier worker answered but was lost or
	// paused before its ack landed).
	AlreadyAnswered int64
	// DuplicateResults published by this worker that the results stream
	// dropped because the call already had one: a stale attempt, for
	// instance from a worker paused past the ack wait, finished second.
	DuplicateResults int64
	// Refused messages dropped without running or answering them: calls
	// of a gated tool without a valid release (see windlass.Refusal).
	Refused int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{
		Completed: s.completed.Load(), Failed: s.failed.Load(), Malformed: s.malformed.Load(), Requeued: s.requeued.Load(),
		Retried: s.retried.Load(), Canceled: s.canceled.Load(), Dead: s.dead.Load(),
		AlreadyAnswered: s.alreadyAnswered.Load(), DuplicateResults: s.duplicateResults.Load(), Refused: s.refused.Load(),
	}
}

// handle takes one delivered call, in its consumer span when tracing is
// on; see process. done runs once the call's message is settled or handed
// back, which may be after handle returns.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg, t *registered, log *slog.Logger, done func()) {
	if w.tracer.Enabled() {
		var span trace.Span
		ctx, span = w.startProcess(ctx, msg, t)
		settled := done
		done = func() { span.End(); settled() }
	}
	w.process(ctx, msg, t, log, done)
}

// process takes one delivered call. A call that must not run (malformed,
// already answered, out of deliveries, refused, canceled) is settled before
// process returns. Otherwise process starts the tool and returns: the call
// is settled when the tool answers (see running.finish), so a call whose
// tool waits holds only the tool's goroutine, not the handler's too.
func (w *Worker) process(ctx context.Context, msg jetstream.Msg, t *registered, log *slog.Logger, done func()) {
	origin := msg.Headers().Get(layout.HeaderOrigin)
	c := &running{w: w, ctx: ctx, msg: msg, t: t, origin: origin, done: done}
	started := false
	defer func() {
		if !started {
			c.end()
		}
	}()
	meta, err := msg.Metadata()
	if err != nil {
		log.ErrorContext(ctx, "worker: message without JetStream metadata; terminating", "tool", t.spec.Name, "error", err)
		w.settle(ctx, msg, term, nil, origin, log)
		return
	}

	var call windlass.ToolCall
	if err := json.Unmarshal(msg.Data(), &call); err != nil || call.Validate() != nil {
		if err == nil {
			err = call.Validate()
		}
		id := readableID(msg.Data())
		if t.spec.RequiresApproval {
			// Not answered, even when an id can be read: it is not the
			// approval service's release of any call.
			c.call, c.log = windlass.ToolCall{ID: id, Name: t.spec.Name}, log
			w.drop(ctx, c, meta, release.ReasonMalformed, "the call message is malformed: "+err.Error())
			return
		}
		w.stats.malformed.Add(1)
		log.WarnContext(ctx, "worker: malformed call; terminating it", "tool", t.spec.Name, "call_id", id, "error", err)
		if id == "" {
			w.settle(ctx, msg, term, nil, origin, log)
			return
		}
		r := windlass.ErrorResult(windlass.ToolCall{ID: id, Name: t.spec.Name}, windlass.CodeInvalidCall,
			fmt.Sprintf("The call message is malformed: %v", err))
		w.settle(ctx, msg, term, &r, origin, log)
		return
	}
	call.Attempt = int(meta.NumDelivered)
	identify(ctx, call)
	log = log.With("call_id", call.ID, "tool", call.Name, "attempt", call.Attempt)
	c.call, c.log = call, log

	// One heartbeat from delivery until the message is settled, which
	// includes publishing the result.
	hb := w.startHeartbeat(msg, call)
	c.hb = hb

	if t.spec.RequiresApproval {
		var ok bool
		if call, ok = w.admitGated(ctx, c, meta); !ok {
			return
		}
		c.call, origin = call, c.origin
	}
	if !t.spec.RequiresApproval && call.Attempt > 1 && w.answered(ctx, call.ID) { // a gated call was looked up by admitGated
		// Its earlier worker published the result but was lost (or paused
		// past the ack wait) before its ack landed: the caller has its
		// answer; running the call again would only repeat its effects.
		// Checked first: an answered call is not dead, however many
		// deliveries it took.
		log.InfoContext(ctx, "worker: redelivered call already answered; acking without running")
		w.stats.alreadyAnswered.Add(1)
		w.settle(ctx, msg, ack, nil, origin, log)
		return
	}
	if call.Attempt > w.cfg.MaxDeliver {
		// Every earlier delivery was lost with its worker: do not risk a
		// worker on it again.
		w.bury(ctx, msg, call, origin, log)
		return
	}

	if r, refused := w.refuse(call, t, meta); refused {
		w.settle(ctx, msg, ack, &r, origin, log)
		return
	}

	c.token = layout.CallToken(call.ID)
	c.callCtx, c.cancel = context.WithCancelCause(ctx)
	rec, canceled := w.cancels.start(c.token, c.cancel)
	if !canceled && time.Since(meta.Timestamp) > cancelCheckAfter {
		getCtx, stop := context.WithTimeout(ctx, 2*time.Second)
		rec, canceled = w.checkCancellation(getCtx, call.ID)
		stop()
	}
	if canceled {
		log.InfoContext(ctx, "worker: call was canceled before it started; answering canceled")
		w.stats.canceled.Add(1)
		r := windlass.ResultFromError(call, windlass.CancelCause(rec.Reason))
		r.Worker = w.cfg.ID
		w.settle(ctx, msg, ack, &r, origin, log)
		return
	}
	hb.begin()

	c.metered = w.metrics.Started(ctx, call.Name, meta.Timestamp)
	var execCtx context.Context
	execCtx, c.span = w.startExecute(c.callCtx, call)
	started = true // from here on, finish settles the call, perhaps before InvokeAsync returns
	windlass.InvokeAsync(windlass.ContextWithProgress(execCtx, hb.report), t.tool, call, c.settleSoon)
}

// running is a call process has taken: what settling it needs when its
// tool answers. The fields after call are set as process gets to
// them; end releases those that are set.
type running struct {
	w      *Worker
	ctx    context.Context // the call's: its consumer span, for settling and logs
	msg    jetstream.Msg
	t      *registered
	origin string
	done   func()

	call    windlass.ToolCall
	log     *slog.Logger
	hb      *heartbeat
	token   string                  // the call's in the worker's cancellations
	callCtx context.Context         // the tool's, canceled by a cancellation or the shutdown grace
	cancel  context.CancelCauseFunc // of callCtx
	span    trace.Span              // the execution span
	metered func(windlass.ToolResult)
}

// end releases what the call holds, once its message is settled or handed
// back: its place in the cancellations, its context, its heartbeat, and
// then done.
func (c *running) end() {
	if c.token != "" {
		c.w.cancels.finish(c.token)
	}
	if c.cancel != nil {
		c.cancel(nil)
	}
	if c.hb != nil {
		c.hb.stop()
	}
	c.done()
}

// settleSoon hands the tool's result to finish on the worker's handlers,
// off the tool's own goroutine (see handlers).
func (c *running) settleSoon(result windlass.ToolResult) {
	c.w.handlers.hereOrPool(func() { c.finish(result) })
}

// finish settles a call with its tool's result: stored, then acked; or
// handed back for a retry or at shutdown; or recorded dead.
func (c *running) finish(result windlass.ToolResult) {
	defer c.end()
	w, ctx, msg, call, origin, log := c.w, c.ctx, c.msg, c.call, c.origin, c.log
	c.hb.ended()
	endExecute(c.span, result)
	if c.metered != nil {
		c.metered(result)
	}
	if log.Enabled(ctx, slog.LevelDebug) {
		log.DebugContext(ctx, "worker: call ran", "outcome", telemetry.OutcomeOf(result), "duration_ms", result.DurationMS)
	}
	logPanic(ctx, log, result)
	result.Worker = w.cfg.ID
	result.Attempt = call.Attempt
	if result.Code() != windlass.CodeInvalidArguments {
		// The tool ran (arguments that do not fit are refused before it
		// starts; see windlass.InvokeAsync).
		result.StartedAt = c.hb.startedAt
	}

	switch {
	case errors.Is(context.Cause(c.callCtx), errShutdown) && result.IsError:
		log.InfoContext(ctx, "worker: call interrupted by shutdown; handing it back")
		c.hb.stop()
		w.settle(ctx, msg, nak, nil, origin, log)
		return
	case errors.Is(context.Cause(c.callCtx), windlass.ErrCallCanceled) && result.Code() == windlass.CodeCanceled:
		w.stats.canceled.Add(1)
	case result.Code() == windlass.CodeInvalidArguments:
		// Never retried: the same arguments fail the same way.
		w.settle(ctx, msg, term, &result, origin, log)
		return
	}
	if delay, ok := w.retryDelay(call, c.t, result); ok {
		log.InfoContext(ctx, "worker: retryable failure; the call will be retried", "in", delay, "error", result.Content)
		w.stats.retried.Add(1)
		c.hb.attemptEvent(&windlass.Event{Kind: windlass.EventRetrying, Attempt: call.Attempt, Error: result.Error, RetryAt: time.Now().Add(delay)}, false)
		c.hb.stop()
		if err := msg.NakWithDelay(delay); err != nil {
			log.WarnContext(ctx, "worker: handing the call back for a retry failed; it is redelivered after the ack wait", "error", err)
		}
		return
	}
	if result.Error != nil && result.Error.Retryable && c.t.cfg.retry.MaxAttempts > 1 {
		// Its retries ran out: keep it for inspection and replay.
		if !w.recordDead(ctx, call, call.Attempt, *result.Error, origin, log) {
			return // left for redelivery, which records it again
		}
	}
	w.settle(ctx, msg, ack, &result, origin, log)
}

// cancelCheckAfter is the queue wait past which a call is looked up in the
// cancels stream itself before it starts. The follower of the stream may
// lag (a loaded machine); a call that waited a while may have been canceled
// meanwhile. A call pulled within this time of its publish is not looked
// up, which keeps the direct get off the fast path: a cancellation made in
// that instant reaches the tool as a canceled context instead.
const cancelCheckAfter = 20 * time.Millisecond

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

// retryDelay reports whether a failed attempt is retried, and after how
// long: the error must be retryable (or a tool timeout, when the policy
// says so), attempts and deliveries must remain, and the next attempt must
// be able to start before the call's deadline.
func (w *Worker) retryDelay(call windlass.ToolCall, t *registered, r windlass.ToolResult) (time.Duration, bool) {
	if r.Error == nil {
		return 0, false
	}
	p := t.cfg.retry
	retryable := r.Error.Retryable ||
		p.RetryTimeouts && r.Error.Code == windlass.CodeTimeout && (call.Deadline.IsZero() || time.Now().Before(call.Deadline))
	if !retryable || call.Attempt >= p.MaxAttempts || call.Attempt >= w.cfg.MaxDeliver {
		return 0, false
	}
	delay := p.backoff(call.Attempt, time.Duration(r.Error.RetryAfterMS)*time.Millisecond)
	if !call.Deadline.IsZero() && !time.Now().Add(delay).Before(call.Deadline) {
		return 0, false
	}
	return delay, true
}

// answered reports whether the call already has a result in the results
// stream (see storedResult). When it cannot tell, it says no: for an ungated
// call running again is safe (at least once), skipping a call that has no
// answer is not. A gated call never runs on this guess (admitGated).
func (w *Worker) answered(ctx context.Context, callID string) bool {
	_, ok, _ := w.storedResult(ctx, callID)
	return ok
}

// bury answers a call whose deliveries ran out worker_lost, with the last
// retryable error it had if any, records it as dead, and terminates it so it
// does not stay in the work queue.
func (w *Worker) bury(ctx context.Context, msg jetstream.Msg, call windlass.ToolCall, origin string, log *slog.Logger) {
	lost := call.Attempt - 1
	text := fmt.Sprintf("The call to %q was lost: it was delivered %d times and each worker that took it stopped answering (crashed, killed or cut off) before it finished. It was not run again; see the dead calls to replay it.", call.Name, lost)
	if last, ok := w.lastRetryError(ctx, call.ID); ok {
		text += " Its last error was: " + last.Message
	}
	r := windlass.ErrorResult(call, windlass.CodeWorkerLost, text)
	r.Worker = w.cfg.ID
	log.WarnContext(ctx, "worker: call ran out of deliveries; answering worker_lost", "deliveries", lost)
	if !w.recordDead(ctx, call, lost, *r.Error, origin, log) {
		return
	}
	w.settle(ctx, msg, term, &r, origin, log)
}

// lastRetryError reads the error of the call's latest retrying event.
func (w *Worker) lastRetryError(ctx context.Context, callID string) (windlass.CallError, bool) {
	getCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
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

// recordDead stores a dead call durably (deduplicated by call id). It
// reports false, having logged why, when it could not.
func (w *Worker) recordDead(ctx context.Context, call windlass.ToolCall, deliveries int, cause windlass.CallError, origin string, log *slog.Logger) bool {
	call.Attempt = 0 // the replay starts afresh
	cause.Message = textcut.Cut(cause.Message, maxEventText)
	rec := windlass.DeadCall{Call: call, Error: cause, Deliveries: deliveries, Worker: w.cfg.ID, DiedAt: time.Now(), Origin: origin}
	data, err := json.Marshal(rec)
	if err != nil {
		log.ErrorContext(ctx, "worker: encode dead call", "error", err)
		return false
	}
	m := &nats.Msg{Subject: layout.DeadSubject(call.Name), Data: data, Header: nats.Header{
		nats.MsgIdHdr: []string{layout.DeadMsgID(call.ID)}, layout.HeaderProtocol: []string{protocolVersion},
	}}
	if limit := w.cfg.JetStream.Conn().MaxPayload(); limit > 0 && int64(layout.MessageSize(m)) > limit {
		// A call near the max payload and an error: keep the record,
		// without the arguments and metadata, rather than leave the call
		// to run again.
		rec.Call.Arguments, rec.Call.Metadata, rec.ArgumentsOmitted = nil, nil, true
		if m.Data, err = json.Marshal(rec); err != nil {
			return false
		}
	}
	if _, err := w.publishDurably(ctx, m); errors.Is(err, nats.ErrMaxPayload) {
		// Still too large: the answer matters more than the record, and a
		// redelivery would only fail the same way (after running again).
		log.ErrorContext(ctx, "worker: the dead call's record is too large to keep; answering without it", "error", err)
		return true
	} else if err != nil {
		log.ErrorContext(ctx, "worker: could not record the dead call; leaving it for redelivery", "error", err)
		return false
	}
	w.stats.dead.Add(1)
	return true
}

// refuse answers, without running the tool, a call that must not run. A
// gated call comes here only once admitGated proved it the rightful
// message of its release, whose expiry is the call's deadline by then.
func (w *Worker) refuse(call windlass.ToolCall, t *registered, meta *jetstream.MsgMetadata) (windlass.ToolResult, bool) {
	now := time.Now()
	switch {
	case call.Name != t.spec.Name:
		return windlass.ErrorResult(call, windlass.CodeInvalidCall,
			fmt.Sprintf("The call names tool %q but arrived on the subject of %q.", call.Name, t.spec.Name)), true
	case !call.Deadline.IsZero() && !now.Before(call.Deadline):
		return windlass.ErrorResult(call, windlass.CodeTimeout,
			fmt.Sprintf("Tool %q timed out: the call's deadline passed %s before a worker took it.", call.Name, now.Sub(call.Deadline).Round(time.Millisecond))), true
	case t.cfg.maxQueueWait > 0 && call.Attempt == 1 && now.Sub(meta.Timestamp) > t.cfg.maxQueueWait:
		// Schedule-to-start: only the first delivery waited in the queue.
		// A later one follows a retry's backoff or a lost worker, and the
		// message's timestamp is still its first publish.
		return windlass.ErrorResult(call, windlass.CodeTimeout,
			fmt.Sprintf("Tool %q timed out: the call waited %s in the queue, longer than its bound of %s.", call.Name, now.Sub(meta.Timestamp).Round(time.Millisecond), t.cfg.maxQueueWait)), true
	case call.SpecHash != "" && call.SpecHash != t.hash:
		return windlass.ErrorResult(call, windlass.CodeSpecMismatch,
			fmt.Sprintf("Tool %q changed: this worker serves schema %s but the call was made for schema %s. List the tools again and retry.", call.Name, t.hash, call.SpecHash)), true
	}
	return windlass.ToolResult{}, false
}

// settle is the one place that maps an outcome onto JetStream: publish the
// result durably (when there is one), then ack, term or nak the call.
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, d decision, result *windlass.ToolResult, origin string, log *slog.Logger) {
	if result != nil {
		sent, err := w.publishResult(ctx, *result, origin)
		if err != nil {
			// Not acked: JetStream redelivers the call after AckWait.
			log.ErrorContext(ctx, "worker: could not publish the result; leaving the call for redelivery", "error", err)
			return
		}
		if sent.Code() == windlass.CodeResultTooLarge && result.Code() != windlass.CodeResultTooLarge {
			log.WarnContext(ctx, "worker: the tool's result is over the max payload; answered result_too_large", "error", sent.Content)
		}
		result = &sent
		w.metrics.Answered(ctx, *result)
		if result.IsError {
			w.stats.failed.Add(1)
			telemetry.SetError(trace.SpanFromContext(ctx), string(result.Code()), result.Content)
		} else {
			w.stats.completed.Add(1)
		}
	}
	var err error
	switch d {
	case ack:
		err = msg.Ack()
	case term:
		err = msg.Term()
	case nak:
		w.stats.requeued.Add(1)
		err = msg.Nak()
	}
	if err != nil {
		log.WarnContext(ctx, "worker: settling the call's message failed", "error", err)
	}
}

// publishResult publishes result to the results stream, retrying with
// backoff for up to half the ack wait, and returns what it published. A
// result the stream drops as a duplicate (the call already had one) is
// counted, not an error. A result too large to publish is replaced by its
// result_too_large answer (see tooLarge): the tool did its work, and
// leaving the call for redelivery would only run it again, to the same end.
func (w *Worker) publishResult(ctx context.Context, result windlass.ToolResult, origin string) (windlass.ToolResult, error) {
	data, err := json.Marshal(result)
	if err != nil {
		return result, fmt.Errorf("encode result: %w", err)
	}
	if !validOrigin(origin) {
		origin = "anonymous"
	}
	m := &nats.Msg{
		Subject: layout.ResultSubject(origin, result.CallID),
		Data:    data,
		Header:  nats.Header{nats.MsgIdHdr: []string{layout.ResultMsgID(result.CallID)}, layout.HeaderProtocol: []string{protocolVersion}},
	}
	limit := w.cfg.JetStream.Conn().MaxPayload()
	if size := layout.MessageSize(m); limit > 0 && int64(size) > limit {
		result, m.Data = w.tooLarge(result, size, limit)
	}
	ack, err := w.publishDurably(ctx, m)
	if errors.Is(err, nats.ErrMaxPayload) && result.Code() != windlass.CodeResultTooLarge {
		// The server's limit is below what the client was told (a
		// reconfigured server): the same answer.
		result, m.Data = w.tooLarge(result, layout.MessageSize(m), limit)
		ack, err = w.publishDurably(ctx, m)
	}
	if err == nil && ack.Duplicate {
		w.stats.duplicateResults.Add(1)
	}
	return result, err
}

// publishDurably publishes m to its stream and waits for the stream's
// acknowledgement, retrying with backoff for up to half the ack wait, also
// while the worker shuts down.
func (w *Worker) publishDurably(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	pubCtx := context.WithoutCancel(ctx)
	start := time.Now()
	ack, err := w.publishAttempt(pubCtx, m)
	if err == nil {
		return ack, nil // the usual case, without the backoff's allocations
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return nil, err // the same message never fits
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxElapsedTime = w.cfg.AckWait/2 - time.Since(start)
	if b.MaxElapsedTime <= 0 {
		return nil, err
	}
	time.Sleep(b.InitialInterval)
	err = backoff.Retry(func() error {
		var err error
		ack, err = w.publishAttempt(pubCtx, m)
		if errors.Is(err, nats.ErrMaxPayload) {
			return backoff.Permanent(err) // the same message never fits
		}
		return err
	}, b)
	return ack, err
}

// publishAttempt is one try of publishDurably, bounded at 5 s.
func (w *Worker) publishAttempt(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return w.cfg.JetStream.PublishMsg(ctx, m)
}

var protocolVersion = fmt.Sprint(windlass.ProtocolVersion)

// validOrigin reports whether an origin header is a safe subject token.
func validOrigin(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return windlass.ValidateName(s) == nil
}

// readableID extracts a valid call id from a malformed message, or "".
func readableID(data []byte) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &probe) != nil || windlass.ValidateCallID(probe.ID) != nil {
		return ""
	}
	return probe.ID
}
