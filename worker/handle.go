package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
)

// stats counts what the worker did; read by tests and the status view.
type stats struct {
	completed, failed, malformed, requeued, retried, canceled, dead, alreadyAnswered, duplicateResults, refused, leftAlone atomic.Int64

	waitingForTurn atomic.Int64 // a gauge, not a counter
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
	// LeftAlone redeliveries of a call this worker still held, left to the
	// delivery that holds it (its in-progress acks came late), or that
	// another live worker said it still holds (see HeldProbeSubject in
	// the protocol): neither run nor settled.
	LeftAlone int64

	// WaitingForTurn is not a counter but the calls waiting now for their
	// turn under their tool's execution rate (see WithRate).
	WaitingForTurn int64
}

// Stats returns the worker's counters, and how many calls wait for their turn.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{
		Completed: s.completed.Load(), Failed: s.failed.Load(), Malformed: s.malformed.Load(), Requeued: s.requeued.Load(),
		Retried: s.retried.Load(), Canceled: s.canceled.Load(), Dead: s.dead.Load(),
		AlreadyAnswered: s.alreadyAnswered.Load(), DuplicateResults: s.duplicateResults.Load(), Refused: s.refused.Load(),
		LeftAlone: s.leftAlone.Load(), WaitingForTurn: s.waitingForTurn.Load(),
	}
}

// handle takes one delivered call, in its consumer span when tracing is
// on; see process. stopped ends once the worker has stopped pulling (a
// call still waiting for its turn under a rate is handed back then). free runs
// once the call's tool is done with its slot, done once the call's message
// is settled or handed back; both may be after handle returns.
func (w *Worker) handle(ctx, stopped context.Context, msg jetstream.Msg, t *registered, log *slog.Logger, free, done func()) {
	if w.tracer.Enabled() {
		var span trace.Span
		ctx, span = w.startProcess(ctx, msg, t)
		settled := done
		done = func() { span.End(); settled() }
	}
	w.process(ctx, stopped, msg, t, log, free, done)
}

// process takes one delivered call. A call that must not run (malformed,
// refused, already answered, out of deliveries, canceled) is settled by its
// guard's outcome before process returns (see intake). Otherwise process
// starts the tool and returns: the call is settled when the tool answers
// (see running.finish), so a call whose tool waits holds only the tool's
// goroutine, not the handler's too. A call of a tool with an execution
// rate first waits for its turn on a goroutine of its own (see awaitTurn),
// so it holds no handler either.
func (w *Worker) process(ctx, stopped context.Context, msg jetstream.Msg, t *registered, log *slog.Logger, free, done func()) {
	d := &delivery{ctx: ctx, stopped: stopped, msg: msg, t: t, baseLog: log, origin: msg.Headers().Get(layout.HeaderOrigin), free: free, done: done}
	o, run := w.intake(d)
	if !run {
		w.apply(d, o)
		return
	}
	if !t.cfg.rate.IsZero() {
		w.waiters.Go(func() { w.awaitTurn(d) })
		return
	}
	w.start(d)
}

// start runs the tool of a call that passed the intake (and had its turn,
// under a rate): from here its start is counted (the started event, the
// queue wait), and running.finish settles it.
func (w *Worker) start(d *delivery) {
	ctx, t := d.ctx, d.t
	d.hb.begin()
	c := &running{w: w, d: d, metered: w.metrics.Started(ctx, d.call.Name, d.meta.Timestamp)}
	var execCtx context.Context
	execCtx, c.span = w.startExecute(d.callCtx, d.call)
	// From here on, finish settles the call, perhaps before InvokeAsync
	// returns.
	windlass.InvokeAsync(windlass.ContextWithProgress(execCtx, d.hb.report), t.tool, d.call, c.settleSoon)
}

// running is a call whose tool runs: what settling it needs when the tool
// answers.
type running struct {
	w       *Worker
	d       *delivery
	span    trace.Span // the execution span
	metered func(windlass.ToolResult)
}

// settleSoon hands the tool's result to finish on the worker's handlers,
// off the tool's own goroutine (see handlers).
func (c *running) settleSoon(result windlass.ToolResult) {
	c.w.handlers.hereOrPool(func() { c.finish(result) })
}

// finish settles a call with its tool's result: it records the attempt's
// facts in the result, and applies what decide makes of it.
func (c *running) finish(result windlass.ToolResult) {
	w, d := c.w, c.d
	d.finishedAt = time.Now()
	d.hb.ended()
	endExecute(c.span, result)
	if c.metered != nil {
		c.metered(result)
	}
	if d.baseLog.Enabled(d.ctx, slog.LevelDebug) {
		d.logger().DebugContext(d.ctx, "worker: call ran", "outcome", telemetry.OutcomeOf(result), "duration_ms", result.DurationMS)
	}
	if result.Panic() != nil {
		logPanic(d.ctx, d.logger(), result)
	}
	result.Worker = w.cfg.ID
	result.Attempt = d.call.Attempt
	if result.Code() != windlass.CodeInvalidArguments {
		// The tool ran (arguments that do not fit are refused before it
		// starts; see windlass.InvokeAsync).
		result.StartedAt = d.hb.startedAt
	}
	w.apply(d, decide(d.call, result, context.Cause(d.callCtx), policy{retry: d.t.cfg.retry, maxDeliver: w.cfg.MaxDeliver, now: time.Now(), attempts: d.attempts(w)}))
}
