package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/streamread"
	"github.com/windlass-dev/windlass/internal/textcut"
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

// admitGated decides whether a message on a gated tool's subject may go
// on, and settles it when not: dropped (not the release's rightful
// message), or handed back for later (the ledger or the results stream
// cannot say now). When it may, it returns the call as the release signs
// it: the deadline is the release's expiry and the result goes to the
// origin the release names, whatever the message's body and headers say.
func (w *Worker) admitGated(ctx context.Context, c *running, meta *jetstream.MsgMetadata) (windlass.ToolCall, bool) {
	call, t, msg, log := c.call, c.t, c.msg, c.log
	if call.Name != t.spec.Name {
		w.drop(ctx, c, meta, release.ReasonOtherCall, fmt.Sprintf("the call names tool %q but arrived on the subject of %q", call.Name, t.spec.Name))
		return call, false
	}
	rel, err := w.releases.Authenticate(msg.Headers().Get(release.Header), call)
	if err != nil {
		w.drop(ctx, c, meta, release.ReasonOf(err), err.Error())
		return call, false
	}
	// The ledger and the results stream must answer; while they cannot,
	// the worker asks again in place, the heartbeat keeping the message: a
	// hand-back would count as a delivery, and five of them would bury a
	// genuine call as worker_lost.
	var fresh bool
	err = w.untilAnswered(ctx, c, rel.ExpiresAt, "cannot check the release ledger now", func(ctx context.Context) error {
		var err error
		fresh, err = w.ledger.Claim(ctx, call.ID, meta.Sequence.Stream, rel.ExpiresAt)
		return err
	})
	switch {
	case errors.Is(err, release.ErrInvalid):
		w.drop(ctx, c, meta, release.ReasonOf(err), err.Error())
		return call, false
	case err != nil:
		w.handBack(ctx, c, "cannot check the release ledger now", err)
		return call, false
	}
	// Whether the call has its answer already, as the results stream's
	// leader says, on every delivery: a gated call never runs on a guess.
	var stored windlass.ToolResult
	var answered bool
	err = w.untilAnswered(ctx, c, rel.ExpiresAt, "cannot tell whether the call was answered already", func(ctx context.Context) error {
		var err error
		stored, answered, err = w.storedResult(ctx, call.ID)
		return err
	})
	switch {
	case err != nil:
		w.handBack(ctx, c, "cannot tell whether the call was answered already", err)
		return call, false
	case answered && !fresh:
		// This very message ran; its worker answered, then was lost
		// before its ack landed.
		log.InfoContext(ctx, "worker: redelivered call already answered; acking without running")
		w.stats.alreadyAnswered.Add(1)
		w.settle(ctx, msg, ack, nil, c.origin, log)
		return call, false
	case answered && stored.Code() == windlass.CodeCanceled:
		// Canceled after its release, before a worker took it: the
		// canceler answered the caller.
		log.InfoContext(ctx, "worker: released call was canceled before it started; acking without running")
		w.stats.canceled.Add(1)
		w.settle(ctx, msg, ack, nil, c.origin, log)
		return call, false
	case answered:
		// The first use of a release whose call has its answer: a copy of
		// a message that ran, replayed after the ledger lost its claim.
		w.drop(ctx, c, meta, release.ReasonAnswered, "the call already has its result; a released call runs once")
		return call, false
	}
	call.Deadline = rel.ExpiresAt
	if rel.SpecHash != "" {
		call.SpecHash = rel.SpecHash
	}
	if validOrigin(rel.Origin) {
		c.origin = rel.Origin
	}
	log.DebugContext(ctx, "worker: release verified", "approved_by", rel.ApprovedBy, "first_use", fresh)
	return call, true
}

// untilAnswered calls ask until it returns nil or a refusal (wrapping
// release.ErrInvalid), retrying any other error with backoff until until
// (the release's expiry: past it the call cannot run anyway) or the
// worker's shutdown. It returns ask's last error.
func (w *Worker) untilAnswered(ctx context.Context, c *running, until time.Time, what string, ask func(context.Context) error) error {
	err := ask(ctx)
	if err == nil || errors.Is(err, release.ErrInvalid) {
		return err // the usual case, without the backoff's allocations
	}
	c.log.WarnContext(ctx, "worker: "+what+"; asking again", "error", err)
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = gatedRetryInterval, 2*time.Second, 0
	last := err
	_ = backoff.Retry(func() error {
		if last = ask(ctx); last == nil || errors.Is(last, release.ErrInvalid) {
			return nil
		}
		return last
	}, backoff.WithContext(b, ctx))
	return last
}

// gatedRetryInterval is the first wait before a gated call's release is
// checked again, and the delay of a hand-back.
const gatedRetryInterval = 100 * time.Millisecond

// handBack returns a call to the stream for a later delivery, without
// answering it: what it needs to be judged stayed unreachable until its
// release expired, or the worker is shutting down.
func (w *Worker) handBack(ctx context.Context, c *running, why string, err error) {
	c.log.WarnContext(ctx, "worker: "+why+"; handing the call back", "error", err)
	w.stats.requeued.Add(1)
	c.hb.stop()
	if err := c.msg.NakWithDelay(gatedRetryInterval); err != nil {
		c.log.WarnContext(ctx, "worker: handing the call back failed; it is redelivered after the ack wait", "error", err)
	}
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
	_ = json.Unmarshal(data, &r) // a result that does not decode is a result all the same
	return r, true, nil
}

// drop terminates a message that must neither run nor be answered, and
// tells operators: a refusal record, the refusals metric, a warning. The
// record is best effort (retried like a result); the message is terminated
// whether or not it could be stored, so a flood of forgeries is not
// redelivered.
func (w *Worker) drop(ctx context.Context, c *running, meta *jetstream.MsgMetadata, reason release.Reason, detail string) {
	msg, log := c.msg, c.log
	if reason == "" {
		reason = release.ReasonMalformed
	}
	w.stats.refused.Add(1)
	w.metrics.Refused(ctx, c.t.spec.Name, string(reason))
	rec := windlass.Refusal{
		CallID: c.call.ID, Tool: c.t.spec.Name, Reason: string(reason), Detail: textcut.Cut(detail, maxEventText),
		MsgID: msg.Headers().Get(nats.MsgIdHdr), Origin: textcut.Cut(msg.Headers().Get(layout.HeaderOrigin), 256),
		Worker: w.cfg.ID, At: time.Now(),
	}
	if meta != nil {
		rec.Seq, rec.PublishedAt = meta.Sequence.Stream, meta.Timestamp
	}
	log.WarnContext(ctx, "worker: refused a message on a gated tool's subject; dropped without running or answering it",
		"reason", reason, "detail", rec.Detail, "stream_seq", rec.Seq, "msg_id", rec.MsgID, "claimed_origin", rec.Origin)
	if c.hb != nil {
		c.hb.stop()
	}
	if data, err := json.Marshal(rec); err == nil {
		m := &nats.Msg{Subject: layout.RefusalSubject(c.t.spec.Name), Data: data, Header: nats.Header{
			nats.MsgIdHdr: []string{layout.RefusalMsgID(rec.Seq)}, layout.HeaderProtocol: []string{protocolVersion},
		}}
		if _, err := w.publishDurably(ctx, m); err != nil {
			log.ErrorContext(ctx, "worker: could not record the refusal", "error", err)
		}
	}
	if err := msg.Term(); err != nil {
		log.WarnContext(ctx, "worker: terminating the refused message failed", "error", err)
	}
}
