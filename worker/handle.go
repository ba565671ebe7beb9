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

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
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
	completed, failed, malformed, requeued atomic.Int64
}

// Stats is a snapshot of a worker's counters.
type Stats struct {
	// Completed calls answered with a success result.
	Completed int64
	// Failed calls answered with an error result.
	Failed int64
	// Malformed messages terminated.
	Malformed int64
	// Requeued calls handed back to the stream (shutdown).
	Requeued int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{Completed: w.stats.completed.Load(), Failed: w.stats.failed.Load(), Malformed: w.stats.malformed.Load(), Requeued: w.stats.requeued.Load()}
}

// handle runs one delivered call and settles its message.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg, t *registered, log *slog.Logger) {
	origin := msg.Headers().Get(layout.HeaderOrigin)
	meta, err := msg.Metadata()
	if err != nil {
		log.Error("worker: message without JetStream metadata; terminating", "tool", t.spec.Name, "error", err)
		w.settle(ctx, msg, term, nil, origin, log)
		return
	}

	var call windlass.ToolCall
	if err := json.Unmarshal(msg.Data(), &call); err != nil || call.Validate() != nil {
		if err == nil {
			err = call.Validate()
		}
		w.stats.malformed.Add(1)
		id := readableID(msg.Data())
		log.Warn("worker: malformed call; terminating it", "tool", t.spec.Name, "call_id", id, "error", err)
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
	log = log.With("call_id", call.ID, "tool", call.Name, "attempt", call.Attempt)

	// In-progress acks from delivery until the message is settled, which
	// includes publishing the result.
	stopKeepAlive := keepAlive(msg, w.cfg.AckWait/3)
	defer stopKeepAlive()

	if r, refused, err := w.refuse(ctx, call, t, msg, meta); err != nil {
		// Not the release's fault (Redis unreachable for the ledger): try
		// again later rather than answer rejected.
		log.Warn("worker: cannot check the release now; retrying the call later", "error", err)
		w.stats.requeued.Add(1)
		_ = msg.NakWithDelay(time.Second)
		return
	} else if refused {
		w.settle(ctx, msg, ack, &r, origin, log)
		return
	}

	result := windlass.Invoke(ctx, t.tool, call)

	if errors.Is(context.Cause(ctx), errShutdown) && result.IsError {
		log.Info("worker: call interrupted by shutdown; handing it back")
		w.settle(ctx, msg, nak, nil, origin, log)
		return
	}
	result.Worker = w.cfg.ID
	result.Attempt = call.Attempt
	w.settle(ctx, msg, ack, &result, origin, log)
}

// refuse answers, without running the tool, a call that must not run.
// It returns an error, and no decision, when it cannot tell (the release
// ledger is unreachable).
func (w *Worker) refuse(ctx context.Context, call windlass.ToolCall, t *registered, msg jetstream.Msg, meta *jetstream.MsgMetadata) (windlass.ToolResult, bool, error) {
	now := time.Now()
	switch {
	case call.Name != t.spec.Name:
		return windlass.ErrorResult(call, windlass.CodeInvalidCall,
			fmt.Sprintf("The call names tool %q but arrived on the subject of %q.", call.Name, t.spec.Name)), true, nil
	case !call.Deadline.IsZero() && !now.Before(call.Deadline):
		return windlass.ErrorResult(call, windlass.CodeTimeout,
			fmt.Sprintf("Tool %q timed out: the call's deadline passed %s before a worker took it.", call.Name, now.Sub(call.Deadline).Round(time.Millisecond))), true, nil
	case t.cfg.maxQueueWait > 0 && now.Sub(meta.Timestamp) > t.cfg.maxQueueWait:
		return windlass.ErrorResult(call, windlass.CodeTimeout,
			fmt.Sprintf("Tool %q timed out: the call waited %s in the queue, longer than its bound of %s.", call.Name, now.Sub(meta.Timestamp).Round(time.Millisecond), t.cfg.maxQueueWait)), true, nil
	case call.SpecHash != "" && call.SpecHash != t.hash:
		return windlass.ErrorResult(call, windlass.CodeSpecMismatch,
			fmt.Sprintf("Tool %q changed: this worker serves schema %s but the call was made for schema %s. List the tools again and retry.", call.Name, t.hash, call.SpecHash)), true, nil
	case t.spec.RequiresApproval:
		// Fail closed: a gated call reaches a worker only through the
		// approval service, which attaches a release this worker verifies.
		err := w.checkRelease(ctx, call, t, msg, meta)
		switch {
		case errors.Is(err, release.ErrInvalid):
			return windlass.ErrorResult(call, windlass.CodeRejected,
				fmt.Sprintf("Tool %q requires approval and this call has no valid release from the approval service (%v); it was not run.", call.Name, err)), true, nil
		case err != nil:
			return windlass.ToolResult{}, false, err
		}
	}
	return windlass.ToolResult{}, false, nil
}

// checkRelease verifies a gated call's release and claims it in the ledger.
func (w *Worker) checkRelease(ctx context.Context, call windlass.ToolCall, t *registered, msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
	if w.cfg.Releases == nil {
		return fmt.Errorf("%w: this worker has no release keys configured", release.ErrInvalid)
	}
	r, err := w.cfg.Releases.Verify(msg.Headers().Get(release.Header), call, t.hash, time.Now())
	if err != nil {
		return err
	}
	if w.cfg.Ledger != nil {
		return w.cfg.Ledger.Claim(ctx, call.ID, meta.Sequence.Stream, r.ExpiresAt)
	}
	return nil
}

// keepAlive sends in-progress acks every interval until the returned stop
// function is called, so a long call is not redelivered while it runs.
func keepAlive(msg jetstream.Msg, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// settle is the one place that maps an outcome onto JetStream: publish the
// result durably (when there is one), then ack, term or nak the call.
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, d decision, result *windlass.ToolResult, origin string, log *slog.Logger) {
	if result != nil {
		if err := w.publishResult(ctx, *result, origin); err != nil {
			// Not acked: JetStream redelivers the call after AckWait.
			log.Error("worker: could not publish the result; leaving the call for redelivery", "error", err)
			return
		}
		if result.IsError {
			w.stats.failed.Add(1)
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
		log.Warn("worker: settling the call's message failed", "error", err)
	}
}

// publishResult publishes result to the results stream, retrying with
// backoff for up to half the ack wait.
func (w *Worker) publishResult(ctx context.Context, result windlass.ToolResult, origin string) error {
	data, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if !validOrigin(origin) {
		origin = "anonymous"
	}
	m := &nats.Msg{
		Subject: layout.ResultSubject(origin, result.CallID),
		Data:    data,
		Header:  nats.Header{nats.MsgIdHdr: []string{layout.ResultMsgID(result.CallID)}, layout.HeaderProtocol: []string{protocolVersion}},
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxElapsedTime = w.cfg.AckWait / 2
	pubCtx := context.WithoutCancel(ctx) // a result is published even during shutdown
	return backoff.Retry(func() error {
		attemptCtx, cancel := context.WithTimeout(pubCtx, 5*time.Second)
		defer cancel()
		_, err := w.cfg.JetStream.PublishMsg(attemptCtx, m)
		return err
	}, b)
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
