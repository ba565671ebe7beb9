package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/retry"
)

// A call of a tool with an execution rate (WithRate) waits for its turn
// after the intake passed it and before its tool starts, on a goroutine of
// its own: it holds its slots (the worker pulls no more calls than it can
// start) and its heartbeat keeps its message alive with in-progress acks,
// but no handler. The turn comes from the tool's one rate in Redis, shared
// by every worker of the tool (limits.Enforcer.Start). The wait ends in
// one of four ways, the last three decided by waitEnded and carried out by
// apply like any other outcome: the turn comes (the tool starts, and only
// then are its start, queue wait and started event taken); the call's
// deadline passes (answered timeout, the tool not run); it is canceled
// (answered canceled); the worker stops pulling (handed back unanswered,
// for another worker, once its last pull request is closed).
//
// While Redis cannot be asked, the wait goes on (fail closed, see package
// limits): the worker asks again with backoff until Redis answers or the
// wait ends otherwise.

// rateWarnEvery bounds how often a tool's unreadable rate is warned of:
// once per period and tool, not once per call and attempt.
const rateWarnEvery = 10 * time.Second

// awaitTurn waits for the call's turn under its tool's rate and starts its
// tool, or applies the outcome of a wait that ended first. It runs on a
// goroutine of its own (see process).
func (w *Worker) awaitTurn(d *delivery) {
	if o, ok := w.turn(d); !ok {
		w.apply(d, o)
		return
	}
	w.start(d)
}

// turn asks the tool's rate for the call's turn until it has one (ok), or
// the wait ends first: then it returns the wait's outcome (see waitEnded).
func (w *Worker) turn(d *delivery) (outcome, bool) {
	w.stats.waitingForTurn.Add(1)
	defer w.stats.waitingForTurn.Add(-1)
	ctx, began := d.callCtx, time.Now()
	if !d.call.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.call.Deadline)
		defer cancel()
	}
	// The heartbeat looks for a cancellation the follower missed while
	// the call waits, as while it runs.
	d.hb.running.Store(true)
	waits := retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}.Waits()
	for failures := 0; ; {
		askCtx, stop := context.WithTimeout(ctx, retry.ReadTimeout)
		wait, err := w.rates.Start(askCtx, d.t.spec.Name, d.t.cfg.rate)
		stop()
		switch {
		case err == nil && wait == 0:
			if failures > 0 {
				d.logger().InfoContext(d.ctx, "worker: the execution rate answers again; the call starts", "failures", failures)
			}
			return outcome{}, true
		case err == nil:
			waits.Reset()
		case ctx.Err() == nil && d.stopped.Err() == nil:
			failures++
			w.warnRateUnread(d, err, failures)
			wait = waits.Next()
		}
		if !sleepTurn(ctx, d.stopped, wait) {
			return w.waitEnded(d, time.Since(began)), false
		}
	}
}

// sleepTurn waits d, and reports false when ctx (the call's wait) or
// stopped (the worker's pulling) ended first.
func sleepTurn(ctx, stopped context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil && stopped.Err() == nil
	case <-ctx.Done():
		return false
	case <-stopped.Done():
		return false
	}
}

// waitEnded is the outcome of a call whose wait for its turn ended before
// the turn came: canceled, answered canceled; past its deadline, answered
// timeout; otherwise the worker is shutting down, and hands it back
// unanswered for another worker. The tool did not run: the answers carry
// no start.
func (w *Worker) waitEnded(d *delivery, waited time.Duration) outcome {
	call, cause := d.call, context.Cause(d.callCtx)
	switch {
	case errors.Is(cause, windlass.ErrCallCanceled):
		r := windlass.ResultFromError(call, cause)
		r.Worker = w.cfg.ID
		o := answered(verbAck, r)
		o.count, o.note, o.level = countCanceled, "worker: call was canceled while it waited for its turn under the tool's execution rate; answering canceled", slog.LevelInfo
		return o
	case !call.Deadline.IsZero() && !time.Now().Before(call.Deadline):
		r := windlass.ErrorResult(call, windlass.CodeTimeout, fmt.Sprintf(
			"Tool %q timed out: the call's deadline passed while it waited %s for its turn under the tool's execution rate of %s; the tool did not run.",
			call.Name, waited.Round(time.Millisecond), d.t.cfg.rate))
		r.Worker = w.cfg.ID
		o := answered(verbAck, r)
		o.note, o.level = "worker: call's deadline passed while it waited for its turn under the tool's execution rate; answering timeout", slog.LevelInfo
		return o
	default: // the worker stopped pulling, or its grace ran out (errShutdown)
		return outcome{verb: verbRequeue, count: countRequeued,
			note: "worker: shutting down; handing back a call that waited for its turn under the tool's execution rate", level: slog.LevelInfo}
	}
}

// warnRateUnread logs that the tool's rate could not be read from Redis:
// a warning at most every rateWarnEvery per tool, debug otherwise.
func (w *Worker) warnRateUnread(d *delivery, err error, failures int) {
	now, last := time.Now().UnixNano(), d.t.rateWarned.Load()
	level := slog.LevelDebug
	if now-last >= int64(rateWarnEvery) && d.t.rateWarned.CompareAndSwap(last, now) {
		level = slog.LevelWarn
	}
	d.logger().Log(d.ctx, level, "worker: the tool's execution rate cannot be read from Redis; its calls wait queued until it can (fail closed)",
		"rate", d.t.cfg.rate.String(), "failures", failures, "error", err)
}
