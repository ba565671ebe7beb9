package worker

import (
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
)

// A delivered call ends in one outcome. The intake's guards (see intake)
// decide it for a call that must not run, decide does for a call whose tool
// answered, and apply alone carries it out: it publishes the answer, records
// a dead call or a refusal, settles the message on JetStream, counts, sends
// the retrying event and logs. Nothing else acks, naks or terminates a call.

// verb is what becomes of a call's message.
type verb int

const (
	// verbAck removes the call: answered, or it needs no answer (it has
	// one already).
	verbAck verb = iota
	// verbTerm removes the call for good, never to be redelivered:
	// malformed, its arguments do not fit, its deliveries ran out.
	verbTerm
	// verbRetry hands the call back for another attempt after delay, with
	// a retrying event: the tool failed with a retryable error.
	verbRetry
	// verbRequeue hands the call back unanswered, for another delivery
	// after delay (at once when zero): the worker cannot judge or finish
	// it now (shutdown; a gated call's ledger unreachable).
	verbRequeue
	// verbDrop neither runs nor answers the message: a refusal is
	// recorded, then the message is terminated (a gated tool's message
	// without a valid release).
	verbDrop
	// verbLeave neither runs, answers nor settles the message: another
	// delivery of it, which this worker holds, settles it (see
	// heldMessages).
	verbLeave
)

// String names the verb in logs.
func (v verb) String() string {
	names := [...]string{verbAck: "ack", verbTerm: "term", verbRetry: "retry", verbRequeue: "requeue", verbDrop: "drop", verbLeave: "leave"}
	if int(v) < len(names) {
		return names[v]
	}
	return "verb(" + strconv.Itoa(int(v)) + ")"
}

// counter names the one worker counter an outcome adds to, beyond those
// apply counts from what it did (completed, failed, dead, duplicate
// results).
type counter int

const (
	countNone counter = iota
	countMalformed
	countRequeued
	countRetried
	countCanceled
	countAlreadyAnswered
	countRefused
	countLeftAlone
)

// outcome is what happens to one delivered call.
type outcome struct {
	verb verb
	// answer is published durably before the message is settled, when
	// answers is set.
	answer  windlass.ToolResult
	answers bool
	// delay of a retry or a requeue.
	delay time.Duration
	// dead, when set, is recorded as a dead call (Deliveries: deliveries)
	// before the answer; if it cannot be, the call is left for redelivery.
	dead       *windlass.CallError
	deliveries int
	// reason and detail of a drop.
	reason release.Reason
	detail string
	// retrying is the event a retry announces.
	retrying *windlass.Event
	count    counter
	// note, when set, is logged at level with attrs.
	note  string
	level slog.Level
	attrs []any
}

// answered returns an outcome that publishes r, then settles with v.
func answered(v verb, r windlass.ToolResult) outcome {
	return outcome{verb: v, answer: r, answers: true}
}

// policy is what decide needs besides the call and how its run ended: the
// tool's retry policy, the worker's bound on deliveries, and the moment of
// the decision.
type policy struct {
	retry      RetryPolicy
	maxDeliver int
	now        time.Time
	// attempts the call's message has had: its delivery count, or more
	// when redeliveries were left alone while this one held it (see
	// heldMessages); zero means the call's Attempt.
	attempts int
}

// decide maps a finished attempt onto its outcome: the tool's result and
// cause, why the tool's context ended early (nil when it did not). It is a
// pure function of its arguments but for the jitter of a retry's delay.
func decide(call windlass.ToolCall, result windlass.ToolResult, cause error, p policy) outcome {
	switch {
	case errors.Is(cause, errShutdown) && result.Code() == windlass.CodeCanceled:
		// The worker's grace ran out under the call, which ended canceled
		// for it: another worker runs it. Only then: cause is read once
		// the tool has answered, so a tool that answered an error of its
		// own (or timed out) just before the grace ran out finds it set
		// too, and its answer stands — handed back, it would run again.
		return outcome{verb: verbRequeue, count: countRequeued,
			note: "worker: call interrupted by shutdown; handing it back", level: slog.LevelInfo}
	case result.Code() == windlass.CodeInvalidArguments:
		// Never retried: the same arguments fail the same way.
		return answered(verbTerm, result)
	}
	if delay, ok := p.retryDelay(call, result); ok {
		return outcome{verb: verbRetry, delay: delay, count: countRetried,
			retrying: &windlass.Event{Kind: windlass.EventRetrying, Attempt: call.Attempt, Error: result.Error, RetryAt: p.now.Add(delay)},
			note:     "worker: retryable failure; the call will be retried", level: slog.LevelInfo,
			attrs: []any{"in", delay, "error", result.Content}}
	}
	o := answered(verbAck, result)
	if errors.Is(cause, windlass.ErrCallCanceled) && result.Code() == windlass.CodeCanceled {
		o.count = countCanceled
	}
	if result.Error != nil && result.Error.Retryable && p.retry.MaxAttempts > 1 {
		// Its retries ran out: keep it for inspection and replay.
		o.dead, o.deliveries = result.Error, p.attemptsOf(call)
	}
	return o
}

// attemptsOf is the attempts the call's message has had (see attempts).
func (p policy) attemptsOf(call windlass.ToolCall) int { return max(call.Attempt, p.attempts) }

// retryDelay reports whether a failed attempt is retried, and after how
// long: the error must be retryable (or a tool timeout, when the policy
// says so), attempts and deliveries must remain (counting those left
// alone: a retry past the deliveries' bound would bury the call), and the
// next attempt must be able to start before the call's deadline.
func (p policy) retryDelay(call windlass.ToolCall, r windlass.ToolResult) (time.Duration, bool) {
	if r.Error == nil {
		return 0, false
	}
	beforeDeadline := func(t time.Time) bool { return call.Deadline.IsZero() || t.Before(call.Deadline) }
	retryable := r.Error.Retryable || p.retry.RetryTimeouts && r.Error.Code == windlass.CodeTimeout && beforeDeadline(p.now)
	if attempts := p.attemptsOf(call); !retryable || attempts >= p.retry.MaxAttempts || attempts >= p.maxDeliver {
		return 0, false
	}
	delay := p.retry.backoff(call.Attempt, time.Duration(r.Error.RetryAfterMS)*time.Millisecond)
	return delay, beforeDeadline(p.now.Add(delay))
}
