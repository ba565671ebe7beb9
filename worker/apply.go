package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/internal/textcut"
)

// apply carries out a call's outcome, in this order: log its note; record a
// drop's refusal or a dead call; store the answer; count; send a retry's
// event; stop the heartbeat; settle the message (ack, terminate or nak);
// and end the delivery. The answer is stored through the worker's result
// pipe, which does the rest once the results stream has acknowledged it,
// so apply may return before. When the dead call or the answer cannot be
// stored the message is left as it is: JetStream redelivers it after the
// ack wait, and the redelivery settles it.
func (w *Worker) apply(d *delivery, o outcome) {
	if o.note != "" {
		d.logger().Log(d.ctx, o.level, o.note, o.attrs...)
	}
	switch {
	case o.verb == verbDrop:
		w.recordRefusal(d, o.reason, o.detail)
	case o.dead != nil && !w.recordDead(d, *o.dead, o.deliveries):
		d.end(w) // left for redelivery, which records it again
		return
	}
	if o.answers {
		w.pipe.send(d, o)
		return
	}
	w.conclude(d, o)
}

// conclude does what is left of an outcome once its answer, if it has
// one, is stored: count it, send a retry's event, stop the heartbeat,
// settle the message and end the delivery.
func (w *Worker) conclude(d *delivery, o outcome) {
	w.stats.add(o.count)
	if o.retrying != nil {
		d.hb.attemptEvent(o.retrying, false)
	}
	if d.hb != nil {
		d.hb.stop() // nothing about the call goes out once it is settled
	}
	d.forget(w) // before settling: a redelivery it causes is a new delivery
	if err := settleMessage(d.msg, o); err != nil {
		d.logger().WarnContext(d.ctx, "worker: settling the call's message failed; it is redelivered after the ack wait", "verb", o.verb, "error", err)
	}
	d.end(w)
}

// settleMessage acks, terminates or naks the call's message as o says,
// or leaves it as it is.
func settleMessage(msg jetstream.Msg, o outcome) error {
	switch {
	case o.verb == verbLeave:
		return nil
	case o.verb == verbAck:
		return msg.Ack()
	case o.verb == verbTerm || o.verb == verbDrop:
		return msg.Term()
	case o.delay > 0:
		return msg.NakWithDelay(o.delay)
	default:
		return msg.Nak()
	}
}

// add counts one outcome in c.
func (s *stats) add(c counter) {
	switch c {
	case countMalformed:
		s.malformed.Add(1)
	case countRequeued:
		s.requeued.Add(1)
	case countRetried:
		s.retried.Add(1)
	case countCanceled:
		s.canceled.Add(1)
	case countAlreadyAnswered:
		s.alreadyAnswered.Add(1)
	case countRefused:
		s.refused.Add(1)
	case countLeftAlone:
		s.leftAlone.Add(1)
	}
}

// countAnswer logs, meters and counts an answer the results stream stored.
func (w *Worker) countAnswer(d *delivery, asked, sent windlass.ToolResult, duplicate bool) {
	ctx := d.ctx
	if sent.Code() == windlass.CodeResultTooLarge && asked.Code() != windlass.CodeResultTooLarge {
		d.logger().WarnContext(ctx, "worker: the tool's result is over its limit; answered result_too_large", "error", sent.Content)
	}
	if duplicate {
		w.stats.duplicateResults.Add(1)
		// Another attempt's answer is stored, which points at its own
		// objects, if any.
		w.payloads.Forget(ctx, sent)
	}
	w.metrics.Answered(ctx, sent)
	if sent.IsError {
		w.stats.failed.Add(1)
		telemetry.SetError(trace.SpanFromContext(ctx), string(sent.Code()), sent.Content)
	} else {
		w.stats.completed.Add(1)
	}
}

// mayBeStored reports whether the answer the results stream holds for
// d's call may be sent itself, which was published more than once, so
// that "duplicate" may mean its own earlier publish: the stored answer is
// read, and is this one when it was made by this worker for this attempt
// with the same start and objects. An answer that cannot be read may be
// this one: its objects are kept (the bucket's lifetime removes them if
// nothing points at them).
func (w *Worker) mayBeStored(d *delivery, sent windlass.ToolResult) bool {
	ctx, cancel := context.WithTimeout(d.ctx, retry.ReadTimeout)
	defer cancel()
	stored, ok, err := w.storedResult(ctx, d.call.ID)
	if err != nil || !ok {
		d.logger().DebugContext(ctx, "worker: the stored answer cannot be read; taking it for this one", "found", ok, "error", err)
		return true
	}
	return stored.Worker == sent.Worker && stored.Attempt == sent.Attempt && stored.StartedAt.Equal(sent.StartedAt) &&
		sameRef(stored.DataRef, sent.DataRef) && sameRef(stored.ContentRef, sent.ContentRef)
}

// sameRef reports whether a and b point at the same object, or both at none.
func sameRef(a, b *windlass.PayloadRef) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// resultMessage encodes a call's result as its message on the results
// stream, with the call's record in its headers (see
// layout.SetCallRecord), and returns the result it holds: a result too
// large to publish is replaced by its result_too_large answer (see
// tooLarge): the tool did its work, and leaving the call for redelivery
// would only run it again, to the same end.
func (w *Worker) resultMessage(d *delivery, result windlass.ToolResult) (windlass.ToolResult, *nats.Msg, error) {
	origin := d.origin
	if !validOrigin(origin) {
		origin = "anonymous"
	}
	m := &nats.Msg{
		Subject: resultSubject(origin, d, result.CallID),
		Header:  nats.Header{nats.MsgIdHdr: []string{layout.ResultMsgID(result.CallID)}, layout.HeaderProtocol: []string{protocolVersion}},
	}
	if d.meta != nil {
		layout.SetCallRecord(m.Header, d.meta.Timestamp, d.call.Deadline, d.msg.Headers().Get(layout.HeaderArgsHash), d.call.Key)
	}
	// A receipt is signed over each body the message gets, and counts
	// towards its size like any header: a result that fits inline only
	// without its receipt goes by reference.
	receipted, started := w.receipted(d), result.StartedAt
	var err error
	if payload.Inline(result, w.inline) {
		if m.Data, err = json.Marshal(result); err != nil {
			return result, nil, fmt.Errorf("encode result: %w", err)
		}
		if receipted {
			w.signReceipt(d, m, started)
		}
	}
	if m.Data == nil || int64(layout.MessageSize(m)) > w.inline {
		// Too large for a message (escaping can make it so): its content
		// and value go by reference, up to the tool's limit.
		if result, m.Data, err = w.byReference(d, result); err != nil {
			return result, nil, err
		}
		if receipted {
			w.signReceipt(d, m, started)
		}
	}
	limit := w.cfg.JetStream.Conn().MaxPayload()
	if size := layout.MessageSize(m); limit > 0 && int64(size) > limit {
		result, m.Data = w.tooLarge(result, size, limit)
		if receipted {
			w.signReceipt(d, m, started)
		}
	}
	return result, m, nil
}

// byReference stores a result's content and value in the payloads bucket
// and returns the result that points at them, encoded; a value over the
// tool's limit is answered result_too_large instead (see tooLarge). When
// the bucket cannot be written, the call is left for redelivery, like a
// result that cannot be published.
func (w *Worker) byReference(d *delivery, result windlass.ToolResult) (windlass.ToolResult, []byte, error) {
	if size, limit := payload.ValueSize(result), w.payloadLimit(d.t); size > limit {
		answer, data := w.tooLarge(result, int(size), limit)
		return answer, data, nil
	}
	// Not under the call's context, which the shutdown grace's end
	// cancels: the tool has answered, and an answer left unstored would
	// run it again on another worker. The upload's retries bound it (as
	// publishDurably's bound the publish), the heartbeat keeps the call.
	stub, err := w.payloads.Offload(context.WithoutCancel(d.ctx), result)
	if err != nil {
		return result, nil, fmt.Errorf("store the result by reference: %w", err)
	}
	data, err := json.Marshal(stub)
	if err != nil {
		return result, nil, fmt.Errorf("encode result: %w", err)
	}
	return stub, data, nil
}

// publishDurably publishes m to its stream and waits for the stream's
// acknowledgement, retrying for up to half the ack wait (the heartbeat
// keeps the call meanwhile), also while the worker shuts down. A message
// over the max payload is not retried: it never fits.
func (w *Worker) publishDurably(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	policy := retry.Policy{Initial: 50 * time.Millisecond, For: w.cfg.AckWait / 2, PerAttempt: retry.WriteTimeout}
	return retry.Value(context.WithoutCancel(ctx), policy, func(ctx context.Context) (*jetstream.PubAck, error) {
		ack, err := w.cfg.JetStream.PublishMsg(ctx, m)
		if errors.Is(err, nats.ErrMaxPayload) {
			return nil, retry.Permanent(err)
		}
		return ack, err
	})
}

// recordDead stores a dead call durably (deduplicated by call id). It
// reports false, having logged why, when it could not.
func (w *Worker) recordDead(d *delivery, cause windlass.CallError, deliveries int) bool {
	ctx, log, call := d.ctx, d.logger(), d.call
	call.Attempt = 0 // the replay starts afresh
	if d.argsRef != nil {
		// Arguments by reference stay there (as long as the bucket keeps
		// them): the record points at them.
		call.Arguments, call.ArgumentsRef = json.RawMessage(windlass.ArgumentsByReference), d.argsRef
	}
	cause.Message = textcut.Cut(cause.Message, maxEventText)
	rec := windlass.DeadCall{Call: call, Error: cause, Deliveries: deliveries, Worker: w.cfg.ID, DiedAt: time.Now(), Origin: d.origin}
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

// recordRefusal tells operators about a dropped message: a refusal record,
// the refusals metric, a warning. The record is best effort (retried like a
// result); the message is terminated whether or not it could be stored, so
// a flood of forgeries is not redelivered.
func (w *Worker) recordRefusal(d *delivery, reason release.Reason, detail string) {
	ctx, log, msg := d.ctx, d.logger(), d.msg
	if reason == "" {
		reason = release.ReasonMalformed
	}
	w.metrics.Refused(ctx, d.t.spec.Name, string(reason))
	rec := windlass.Refusal{
		CallID: d.call.ID, Tool: d.t.spec.Name, Reason: string(reason), Detail: textcut.Cut(detail, maxEventText),
		MsgID: msg.Headers().Get(nats.MsgIdHdr), Origin: textcut.Cut(msg.Headers().Get(layout.HeaderOrigin), 256),
		Worker: w.cfg.ID, At: time.Now(),
	}
	if d.meta != nil {
		rec.Seq, rec.PublishedAt = d.meta.Sequence.Stream, d.meta.Timestamp
	}
	log.WarnContext(ctx, "worker: refused a message on a call subject; dropped without running or answering it",
		"reason", reason, "detail", rec.Detail, "stream_seq", rec.Seq, "msg_id", rec.MsgID, "claimed_origin", rec.Origin)
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	m := &nats.Msg{Subject: layout.RefusalSubject(d.t.spec.Name), Data: data, Header: nats.Header{
		nats.MsgIdHdr: []string{layout.RefusalMsgID(rec.Seq)}, layout.HeaderProtocol: []string{protocolVersion},
	}}
	if _, err := w.publishDurably(ctx, m); err != nil {
		log.ErrorContext(ctx, "worker: could not record the refusal", "error", err)
	}
}

var protocolVersion = fmt.Sprint(windlass.ProtocolVersion)

// resultSubject is the subject of the answer to callID, reusing the
// delivery's call token when it is that call's.
func resultSubject(origin string, d *delivery, callID string) string {
	if d.token != "" && d.call.ID == callID {
		return layout.ResultSubjectOfToken(origin, d.token)
	}
	return layout.ResultSubject(origin, callID)
}

// validOrigin reports whether an origin header is a safe subject token.
func validOrigin(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return windlass.ValidateName(s) == nil
}

// freesSlot reports whether the worker frees d's admission slot once its
// answer is stored (see package limits, "A call's slot"): a call whose
// message says it holds one, and a call run under a release (published by
// the approval service, which does not carry the caller's message's
// headers; freeing a slot it does not hold does nothing). Without a
// registry the worker has no Redis to free it in, and leaves it to the
// dispatcher.
func (w *Worker) freesSlot(d *delivery) bool {
	return w.rates != nil && d.msg != nil && (d.msg.Headers().Get(layout.HeaderSlot) == layout.SlotHeld || d.rel != nil)
}

// freeSlotOf frees d's admission slot, without waiting, when the worker
// frees it (see freesSlot): once its answer is stored.
func (w *Worker) freeSlotOf(d *delivery) {
	if w.freesSlot(d) {
		w.rates.FreeCall(d.call.Name, d.call.Key, d.call.ID)
	}
}
