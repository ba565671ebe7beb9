package telemetry

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/retry"
)

// Metric names. Durations are in seconds, as OpenTelemetry recommends.
const (
	MetricDispatcherCalls    = "windlass.dispatcher.calls"
	MetricDispatcherDuration = "windlass.dispatcher.call.duration"
	MetricDispatcherInFlight = "windlass.dispatcher.calls.in_flight"
	MetricLimitsRefused      = "windlass.dispatcher.limits.refused"
	MetricLimitsUnenforced   = "windlass.dispatcher.limits.unenforced"
	MetricLiveWorkers        = "windlass.registry.live_workers"
	MetricRegistryStaleness  = "windlass.registry.staleness"
	MetricWorkerCalls        = "windlass.worker.calls"
	MetricWorkerDuration     = "windlass.worker.execution.duration"
	MetricWorkerQueueWait    = "windlass.worker.queue_wait"
	MetricWorkerInFlight     = "windlass.worker.calls.in_flight"
	MetricWorkerRefusals     = "windlass.worker.refusals"
	MetricApprovalsHeld      = "windlass.approval.held"
	MetricApprovalDecision   = "windlass.approval.decision.duration"
	MetricWebhookDeliveries  = "windlass.approval.webhook.deliveries"
)

// secondsBuckets suit calls from a millisecond to minutes (and approval
// decisions of up to hours, in the last buckets).
var secondsBuckets = metric.WithExplicitBucketBoundaries(
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

// OutcomeOf is a result's outcome label: "ok" or its error code.
func OutcomeOf(r windlass.ToolResult) string {
	if !r.IsError {
		return OutcomeOK
	}
	if c := r.Code(); c != "" {
		return string(c)
	}
	return string(windlass.CodeToolError)
}

// must drops an instrument constructor's error: the SDK returns a usable
// instrument along with any error (an invalid name, which ours are not).
func must[T any](v T, _ error) T { return v }

// DispatcherMetrics are the dispatcher's instruments. A nil
// *DispatcherMetrics (metrics off) records nothing.
type DispatcherMetrics struct {
	calls      metric.Int64Counter
	duration   metric.Float64Histogram
	inFlight   metric.Int64UpDownCounter
	limited    metric.Int64Counter
	unenforced metric.Int64Counter
	meter      metric.Meter
}

// NewDispatcherMetrics creates the dispatcher's instruments on mp (nil: the
// global provider), or returns nil when metrics are off.
func NewDispatcherMetrics(mp metric.MeterProvider) *DispatcherMetrics {
	m, on := Meter(mp)
	if !on {
		return nil
	}
	return &DispatcherMetrics{
		meter: m,
		calls: must(m.Int64Counter(MetricDispatcherCalls, metric.WithUnit("{call}"),
			metric.WithDescription("Calls made through the dispatcher (Call or Submit), counted once by the instance that published them when they finish, by tool and outcome (ok or the error code)."))),
		duration: must(m.Float64Histogram(MetricDispatcherDuration, metric.WithUnit("s"), secondsBuckets,
			metric.WithDescription("Time from a call's submission to its outcome (its result reaching this dispatcher, or the timeout or cancellation its caller saw)."))),
		inFlight: must(m.Int64UpDownCounter(MetricDispatcherInFlight, metric.WithUnit("{call}"),
			metric.WithDescription("Calls published by this dispatcher and not finished yet."))),
		limited: must(m.Int64Counter(MetricLimitsRefused, metric.WithUnit("{call}"),
			metric.WithDescription("Calls refused by the fleet's limits before they were queued, by tool, key and reason (rate, in_flight, tool_queue, calls_stream)."))),
		unenforced: must(m.Int64Counter(MetricLimitsUnenforced, metric.WithUnit("{call}"),
			metric.WithDescription("Calls admitted without their limits checked because Redis could not be asked (admission limits fail open), by tool."))),
	}
}

// Limited counts a call refused by a limit. Nil-safe.
func (m *DispatcherMetrics) Limited(ctx context.Context, tool, key, reason string) {
	if m == nil {
		return
	}
	m.limited.Add(ctx, 1, metric.WithAttributes(Tool.String(tool), Key.String(key), Reason.String(reason)))
}

// Unenforced counts a call admitted with its limits unchecked. Nil-safe.
func (m *DispatcherMetrics) Unenforced(ctx context.Context, tool string) {
	if m == nil {
		return
	}
	m.unenforced.Add(ctx, 1, metric.WithAttributes(Tool.String(tool)))
}

// Start counts a call in flight until its [CallInFlight.Done] or
// [CallInFlight.Drop], whichever comes first. Nil-safe: with metrics off it returns nil, whose
// methods do nothing.
func (m *DispatcherMetrics) Start(ctx context.Context, tool, key string) *CallInFlight {
	if m == nil {
		return nil
	}
	c := &CallInFlight{m: m, ctx: context.WithoutCancel(ctx), tool: tool, key: key, start: time.Now()}
	m.inFlight.Add(c.ctx, 1, metric.WithAttributes(Tool.String(tool), Key.String(key)))
	return c
}

// CallInFlight is one call counted in flight by [DispatcherMetrics.Start].
// Its methods are safe for concurrent use; the first of them takes the call
// out of flight.
type CallInFlight struct {
	m     *DispatcherMetrics
	ctx   context.Context // the caller's, for exemplars; never canceled
	tool  string
	key   string
	start time.Time
	out   atomic.Bool // out of flight already
}

// Done counts the call finished with its result: out of flight (unless
// dropped before), into the calls counter and the duration histogram by
// outcome. Call it at most once. Nil-safe.
func (c *CallInFlight) Done(r windlass.ToolResult) {
	if c == nil {
		return
	}
	c.Drop()
	attrs := metric.WithAttributeSet(attribute.NewSet(Tool.String(c.tool), Key.String(c.key), Outcome.String(OutcomeOf(r))))
	c.m.calls.Add(c.ctx, 1, attrs)
	c.m.duration.Record(c.ctx, time.Since(c.start).Seconds(), attrs)
}

// Drop takes the call out of flight without counting it (a resubmit of a
// call counted elsewhere); a later Done still counts it. Nil-safe.
func (c *CallInFlight) Drop() {
	if c == nil || c.out.Swap(true) {
		return
	}
	c.m.inFlight.Add(c.ctx, -1, metric.WithAttributes(Tool.String(c.tool), Key.String(c.key)))
}

// Refused counts a call refused before it was published. Nil-safe.
func (m *DispatcherMetrics) Refused(ctx context.Context, r windlass.ToolResult, key string) {
	if m == nil {
		return
	}
	m.calls.Add(ctx, 1, metric.WithAttributes(Tool.String(r.Name), Key.String(key), Outcome.String(OutcomeOf(r))))
}

// ObserveRegistry registers the live-workers-per-tool and staleness gauges,
// read from a registry view when metrics are collected. Unregister with the
// returned func. Nil-safe.
func (m *DispatcherMetrics) ObserveRegistry(liveWorkers func(yield func(tool string, n int)), staleness func() time.Duration) (unregister func()) {
	if m == nil {
		return func() {}
	}
	live := must(m.meter.Int64ObservableGauge(MetricLiveWorkers, metric.WithUnit("{worker}"),
		metric.WithDescription("Workers holding a live lease, by tool, as this process's registry view sees them.")))
	stale := must(m.meter.Float64ObservableGauge(MetricRegistryStaleness, metric.WithUnit("s"),
		metric.WithDescription("Time since this process's registry view last synced with Redis; it grows while Redis is unreachable.")))
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		liveWorkers(func(tool string, n int) { o.ObserveInt64(live, int64(n), metric.WithAttributes(Tool.String(tool))) })
		o.ObserveFloat64(stale, staleness().Seconds())
		return nil
	}, live, stale)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// WorkerMetrics are a worker's instruments. A nil *WorkerMetrics (metrics
// off) records nothing.
type WorkerMetrics struct {
	calls     metric.Int64Counter
	duration  metric.Float64Histogram
	queueWait metric.Float64Histogram
	inFlight  metric.Int64UpDownCounter
	refusals  metric.Int64Counter
}

// NewWorkerMetrics creates a worker's instruments on mp (nil: the global
// provider), or returns nil when metrics are off.
func NewWorkerMetrics(mp metric.MeterProvider) *WorkerMetrics {
	m, on := Meter(mp)
	if !on {
		return nil
	}
	return &WorkerMetrics{
		calls: must(m.Int64Counter(MetricWorkerCalls, metric.WithUnit("{call}"),
			metric.WithDescription("Calls a worker answered, by tool and outcome (ok or the error code)."))),
		duration: must(m.Float64Histogram(MetricWorkerDuration, metric.WithUnit("s"), secondsBuckets,
			metric.WithDescription("How long the tool ran, by tool and outcome."))),
		queueWait: must(m.Float64Histogram(MetricWorkerQueueWait, metric.WithUnit("s"), secondsBuckets,
			metric.WithDescription("Time from a call's publish (JetStream's timestamp) to the start of its execution."))),
		inFlight: must(m.Int64UpDownCounter(MetricWorkerInFlight, metric.WithUnit("{call}"),
			metric.WithDescription("Calls running in this worker."))),
		refusals: must(m.Int64Counter(MetricWorkerRefusals, metric.WithUnit("{message}"),
			metric.WithDescription("Messages on a tool's call subject dropped without running or answering them (a gated call without a valid release), by tool and reason."))),
	}
}

// Refused counts a message dropped unanswered, for reason. Nil-safe.
func (m *WorkerMetrics) Refused(ctx context.Context, tool, reason string) {
	if m == nil {
		return
	}
	m.refusals.Add(ctx, 1, metric.WithAttributes(Tool.String(tool), Reason.String(reason)))
}

// Started records a call starting after waiting since published, and
// counts it in flight; the returned func records its execution's end.
// Nil-safe.
func (m *WorkerMetrics) Started(ctx context.Context, tool string, published time.Time) (done func(r windlass.ToolResult)) {
	if m == nil {
		return nil
	}
	start := time.Now()
	toolAttr := metric.WithAttributes(Tool.String(tool))
	m.queueWait.Record(ctx, max(0, start.Sub(published).Seconds()), toolAttr)
	m.inFlight.Add(ctx, 1, toolAttr)
	return func(r windlass.ToolResult) {
		m.inFlight.Add(ctx, -1, toolAttr)
		m.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(Tool.String(tool), Outcome.String(OutcomeOf(r))))
	}
}

// Answered counts a call answered with r: run, or refused, canceled,
// malformed or lost without running. Nil-safe.
func (m *WorkerMetrics) Answered(ctx context.Context, r windlass.ToolResult) {
	if m == nil {
		return
	}
	m.calls.Add(ctx, 1, metric.WithAttributes(Tool.String(r.Name), Outcome.String(OutcomeOf(r))))
}

// ApprovalMetrics are the approval service's instruments. A nil
// *ApprovalMetrics (metrics off) records nothing.
type ApprovalMetrics struct {
	meter    metric.Meter
	decision metric.Float64Histogram
	webhooks metric.Int64Counter
}

// NewApprovalMetrics creates the approval service's instruments on mp (nil:
// the global provider), or returns nil when metrics are off.
func NewApprovalMetrics(mp metric.MeterProvider) *ApprovalMetrics {
	m, on := Meter(mp)
	if !on {
		return nil
	}
	return &ApprovalMetrics{
		meter: m,
		decision: must(m.Float64Histogram(MetricApprovalDecision, metric.WithUnit("s"), secondsBuckets,
			metric.WithDescription("Time from a gated call's arrival to its decision, by tool and decision (approved, rejected, expired, canceled)."))),
		webhooks: must(m.Int64Counter(MetricWebhookDeliveries, metric.WithUnit("{request}"),
			metric.WithDescription("Webhook delivery attempts, by outcome: delivered (2xx) or failed."))),
	}
}

// Decided records a held call's decision. Nil-safe.
func (m *ApprovalMetrics) Decided(ctx context.Context, tool, decision string, waited time.Duration) {
	if m == nil {
		return
	}
	m.decision.Record(ctx, waited.Seconds(), metric.WithAttributes(Tool.String(tool), Decision.String(decision)))
}

// Webhook counts one delivery attempt. Nil-safe.
func (m *ApprovalMetrics) Webhook(ctx context.Context, delivered bool) {
	if m == nil {
		return
	}
	outcome := "failed"
	if delivered {
		outcome = "delivered"
	}
	m.webhooks.Add(ctx, 1, metric.WithAttributes(Outcome.String(outcome)))
}

// ObserveHeld registers the held-approvals gauge, read with count (by the
// collecting goroutine, bounded by its context). Nil-safe.
func (m *ApprovalMetrics) ObserveHeld(count func(ctx context.Context) (int64, error)) (unregister func()) {
	if m == nil {
		return func() {}
	}
	held := must(m.meter.Int64ObservableGauge(MetricApprovalsHeld, metric.WithUnit("{call}"),
		metric.WithDescription("Gated calls held pending a decision.")))
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
		defer cancel()
		n, err := count(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(held, n)
		return nil
	}, held)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
