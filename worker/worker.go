package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// Defaults of [Config].
const (
	DefaultMaxConcurrency  = 1024
	DefaultToolConcurrency = 256
	DefaultAckWait         = 30 * time.Second
	DefaultMaxDeliver      = 5
	DefaultShutdownGrace   = 25 * time.Second
)

// Config configures a [Worker]. Zero values mean the documented defaults.
type Config struct {
	// JetStream is the client the worker pulls calls and publishes results
	// with. Required. The worker never closes its connection.
	JetStream jetstream.JetStream
	// Registry is where the worker advertises its tools. Nil runs the
	// worker without advertising (dispatchers will not route to it).
	Registry *registry.Registry
	// ID names the worker in the registry and in results. Default
	// "<hostname>-<pid>-<random>".
	ID string
	// MaxConcurrency bounds the calls running at once in this process,
	// across tools. Default 1024.
	MaxConcurrency int
	// AckWait is how long JetStream waits for an ack (or an in-progress
	// signal) before redelivering a call. Default 30s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of one call, retries included. A
	// call delivered more often (every worker that took it was lost) is
	// answered worker_lost without running, recorded as dead and removed.
	// Default 5.
	MaxDeliver int
	// Heartbeat is the period of a running call's heartbeat, which carries
	// its progress to the caller; in-progress acks and the cancellation
	// check go at least every AckWait/3. Default AckWait/3, at most 2s.
	Heartbeat time.Duration
	// ShutdownGrace is how long running calls may finish after Run's
	// context ends. Default 25s (under a typical 30s termination grace).
	ShutdownGrace time.Duration
	// Replace advertises this worker's specs even when live workers
	// advertise different ones (a rolling upgrade).
	Replace bool
	// UpdateConsumer rewrites the consumers of the worker's tools with its
	// own settings (AckWait). By default a tool's consumer keeps the
	// settings of the worker that created it, and a worker whose settings
	// differ logs a warning naming each and keeps the existing ones,
	// following the consumer's ack wait when it is shorter than its own.
	// Set it on one worker to change a tool's settings on purpose.
	UpdateConsumer bool
	// Replicas of the streams the worker creates when they are missing.
	// Default 1; use 3 on a three-node cluster.
	Replicas int
	// Releases verifies the approval service's release on calls of tools
	// that require approval. Nil refuses every such call (fail closed).
	// Releases are single-use: the worker records each use in the release
	// ledger (a JetStream key-value bucket, layout.ReleasesBucket), which it
	// creates when it is missing.
	Releases *release.Verifier
	// InlineLimit is the largest result message sent inline, in bytes; a
	// larger result's content and value travel by reference, through the
	// fleet's object store (see PROTOCOL.md, "Payloads by reference").
	// Default 256 KiB (PayloadLimit when that is less); never above the
	// NATS server's max payload.
	InlineLimit int64
	// PayloadLimit is the largest result value, and the largest arguments,
	// a tool of this worker returns or takes by reference, in bytes (a
	// tool may set its own: WithPayloadLimit). A larger result is answered
	// result_too_large; larger arguments payload_too_large, unread.
	// Default 64 MiB.
	PayloadLimit int64
	// Logger receives the worker's logs. Default: discard. Lines written
	// while a call is handled are logged with the call's context, which
	// carries its span when tracing is on.
	Logger *slog.Logger
	// TracerProvider traces each call: a consumer span ("process"), child
	// of the trace context in the call's headers, and a child span around
	// the tool's execution ("execute_tool <tool>"). Default: the global
	// provider; while no SDK is installed there, tracing is off and costs
	// nothing.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the worker's metrics (calls by tool and
	// outcome, execution duration, queue wait, calls in flight). Default:
	// the global provider as it is when New runs; off while no SDK is
	// installed there.
	MeterProvider metric.MeterProvider
}

// withDefaults returns c with every zero field set to its default: the one
// place the worker's defaults are decided.
func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = cmp.Or(sanitizeID(host), "worker") + "-" + strconv.Itoa(os.Getpid()) + "-" + rand.Text()[:6]
	}
	c.MaxConcurrency = cmp.Or(c.MaxConcurrency, DefaultMaxConcurrency)
	c.AckWait = cmp.Or(c.AckWait, DefaultAckWait)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, DefaultMaxDeliver)
	c.Heartbeat = cmp.Or(c.Heartbeat, min(c.AckWait/3, 2*time.Second))
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.PayloadLimit = cmp.Or(c.PayloadLimit, payload.DefaultMax)
	c.InlineLimit = cmp.Or(c.InlineLimit, min(payload.DefaultInline, c.PayloadLimit))
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c after defaults; an error names the one field that is
// wrong.
func (c Config) validate() error {
	switch {
	case c.JetStream == nil:
		return errors.New("worker: Config.JetStream is nil: pass jetstream.New(nc)")
	case c.MaxConcurrency < 0:
		return fmt.Errorf("worker: Config.MaxConcurrency must not be negative, got %d", c.MaxConcurrency)
	case c.AckWait < 300*time.Millisecond:
		return fmt.Errorf("worker: Config.AckWait must be at least 300ms (in-progress acks go every AckWait/3), got %s", c.AckWait)
	case c.MaxDeliver < 0:
		return fmt.Errorf("worker: Config.MaxDeliver must not be negative, got %d", c.MaxDeliver)
	case c.Heartbeat < 10*time.Millisecond || c.Heartbeat > c.AckWait/3:
		return fmt.Errorf("worker: Config.Heartbeat must be from 10ms to AckWait/3, got %s", c.Heartbeat)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("worker: Config.ShutdownGrace must not be negative, got %s", c.ShutdownGrace)
	case c.InlineLimit < 0:
		return fmt.Errorf("worker: Config.InlineLimit must not be negative, got %d", c.InlineLimit)
	case c.PayloadLimit < c.InlineLimit:
		return fmt.Errorf("worker: Config.PayloadLimit must be at least InlineLimit (%d), got %d", c.InlineLimit, c.PayloadLimit)
	}
	return nil
}

// sanitizeID keeps the characters that are safe in a worker id.
func sanitizeID(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			out = append(out, c)
		}
	}
	return string(out)
}

// ToolOption configures one registered tool.
type ToolOption func(*toolConfig)

type toolConfig struct {
	payloadLimit int64 // 0: the worker's
	concurrency  int
	maxQueueWait time.Duration
	retry        RetryPolicy
	rate         limits.Rate // zero: none
}

// WithConcurrency bounds the calls of this tool running at once in this
// worker. Default 256.
func WithConcurrency(n int) ToolOption { return func(c *toolConfig) { c.concurrency = n } }

// WithPayloadLimit bounds, in bytes, the arguments this tool takes and
// the value it returns by reference (see Config.PayloadLimit, the
// default): a larger result is answered result_too_large, larger
// arguments payload_too_large without being read.
func WithPayloadLimit(n int64) ToolOption { return func(c *toolConfig) { c.payloadLimit = n } }

// WithMaxQueueWait bounds how long a call may wait in the queue before it
// starts (schedule-to-start). A call that waited longer is answered timeout
// without running. Only the first delivery is bounded: a retry or a
// redelivery after a lost worker follows a start. Zero (the default) means
// no bound beyond the deadline.
func WithMaxQueueWait(d time.Duration) ToolOption { return func(c *toolConfig) { c.maxQueueWait = d } }

// WithRate declares the tool's execution rate: the tool calls an API that
// allows so many calls per period, so the workers of the tool across the
// fleet start at most r.Events calls per r.Per, with r.Burst at once after
// a quiet spell (limits.PerSecond(10), limits.PerMinute(600).WithBurst(5)).
// They share one count in the registry's Redis (see limits.Enforcer.Start),
// so the worker needs Config.Registry. A call waiting for its turn stays
// queued, kept alive by in-progress acks; it is never refused or failed
// for the rate (see the package doc, "Execution rates"). The zero Rate
// (the default) is none.
func WithRate(r limits.Rate) ToolOption { return func(c *toolConfig) { c.rate = r } }

// registered is a tool with its settings and derived values.
type registered struct {
	tool windlass.Tool
	spec windlass.Spec
	hash string
	cfg  toolConfig

	rateWarned atomic.Int64 // unix ns of the last warning that its rate could not be read
}

// Worker pulls and runs the calls of its registered tools. Register every
// tool before Run; a Worker runs once.
type Worker struct {
	cfg Config

	mu      sync.Mutex
	tools   map[string]*registered
	order   []string
	started bool

	slots    chan struct{}    // process-wide concurrency
	rates    *limits.Enforcer // the tools' execution rates; nil without a registry
	waiters  sync.WaitGroup   // the goroutines of calls waiting for their turn under a rate
	handlers *handlers        // takes calls in and settles them
	pipe     *resultPipe      // stores answers; set by Run
	guards   []guard          // the intake's checks, in order (see intake)
	beats    beats            // the running calls' heartbeats, one ticker for all
	stats    stats

	tracer  telemetry.Tracer
	metrics *telemetry.WorkerMetrics // nil: metrics off

	cancels                                                 *cancellations
	callsStream, resultsStream, eventsStream, cancelsStream jetstream.Stream

	payloads *payload.Store // arguments and results by reference; set by Run
	inline   int64          // the largest result message sent inline

	releases *release.Verifier // never nil: one that trusts no key refuses every release
	ledger   *release.Ledger   // set by Run when a tool is gated
}

// New returns a worker configured by cfg.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	releases := cfg.Releases
	if releases == nil {
		releases = release.NewVerifier() // fail closed
	}
	w := &Worker{cfg: cfg, tools: map[string]*registered{}, slots: make(chan struct{}, cfg.MaxConcurrency), cancels: newCancellations(),
		handlers: newHandlers(maxHandlers), releases: releases,
		tracer: telemetry.NewTracer(cfg.TracerProvider), metrics: telemetry.NewWorkerMetrics(cfg.MeterProvider)}
	if cfg.Registry != nil {
		w.rates = cfg.Registry.Limits()
	}
	w.guards = w.intakeGuards()
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Register adds a tool. It fails for an invalid spec, a name registered
// twice, or after Run has started.
func (w *Worker) Register(tool windlass.Tool, opts ...ToolOption) error {
	spec := tool.Spec()
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("worker: register: %w", err)
	}
	spec = spec.WithDefaults()
	cfg := toolConfig{concurrency: DefaultToolConcurrency}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.concurrency <= 0 || cfg.maxQueueWait < 0 {
		return fmt.Errorf("worker: register %q: concurrency must be positive and max queue wait not negative", spec.Name)
	}
	if cfg.retry.MaxAttempts == 0 {
		cfg.retry.MaxAttempts = min(DefaultMaxAttempts, w.cfg.MaxDeliver)
	}
	cfg.retry = cfg.retry.withDefaults()
	if err := cfg.retry.validate(w.cfg.MaxDeliver); err != nil {
		return fmt.Errorf("worker: register %q: %w", spec.Name, err)
	}
	if err := cfg.rate.Validate(); err != nil {
		return fmt.Errorf("worker: register %q: WithRate: %w", spec.Name, err)
	}
	if !cfg.rate.IsZero() && w.rates == nil {
		return fmt.Errorf("worker: register %q: WithRate(%s) needs Config.Registry: the workers of a tool share its execution rate in the registry's Redis", spec.Name, cfg.rate)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("worker: register %q: the worker is already running", spec.Name)
	}
	if _, dup := w.tools[spec.Name]; dup {
		return fmt.Errorf("worker: register %q: a tool of that name is already registered", spec.Name)
	}
	w.tools[spec.Name] = &registered{tool: tool, spec: spec, hash: spec.Hash(), cfg: cfg}
	w.order = append(w.order, spec.Name)
	return nil
}

// Run serves the registered tools until ctx ends, then shuts down as the
// package doc describes. It returns nil after a clean shutdown, or the error
// that kept it from starting (streams, consumers, a registry conflict).
func (w *Worker) Run(ctx context.Context) error {
	tools, err := w.claimTools()
	if err != nil {
		return err
	}
	log := w.cfg.Logger.With("worker", w.cfg.ID)
	if err := w.openStores(ctx, tools); err != nil {
		return err
	}
	stopFollowing, err := w.cancels.follow(ctx, w.cfg.JetStream, log)
	if err != nil {
		return err
	}
	defer stopFollowing()
	consumers := make([]jetstream.Consumer, len(tools))
	for i, t := range tools {
		if consumers[i], err = w.ensureConsumer(ctx, t); err != nil {
			return err
		}
	}
	w.followAckWait(consumers)
	lease, err := w.advertise(ctx, tools)
	if err != nil {
		return err
	}
	if w.pipe, err = newResultPipe(w); err != nil {
		return err
	}
	log.InfoContext(ctx, "worker: serving", "tools", w.order)
	w.serve(ctx, tools, consumers, log)
	w.pipe.close() // serve returned once every call was concluded
	w.withdraw(ctx, lease, log)
	log.InfoContext(ctx, "worker: stopped")
	return nil
}

// claimTools marks the worker started and returns its tools in the order
// they were registered.
func (w *Worker) claimTools() ([]*registered, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, errors.New("worker: Run called twice")
	}
	w.started = true
	if len(w.order) == 0 {
		return nil, errors.New("worker: no tools registered")
	}
	tools := make([]*registered, 0, len(w.order))
	for _, n := range w.order {
		tools = append(tools, w.tools[n])
	}
	return tools, nil
}

// openStores creates the streams that are missing and opens those the
// worker reads, and the release ledger when a tool is gated.
func (w *Worker) openStores(ctx context.Context, tools []*registered) error {
	js := w.cfg.JetStream
	opts := layout.StreamOptions{Replicas: w.cfg.Replicas}
	if err := layout.EnsureStreams(ctx, js, layout.AllStreams(opts)...); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	for name, s := range map[string]*jetstream.Stream{layout.CallsStream: &w.callsStream, layout.ResultsStream: &w.resultsStream, layout.EventsStream: &w.eventsStream, layout.CancelsStream: &w.cancelsStream} {
		var err error
		if *s, err = js.Stream(ctx, name); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	obs, err := layout.EnsurePayloads(ctx, js, opts)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.payloads = payload.New(obs, js.Conn().MaxPayload())
	w.inline = min(w.cfg.InlineLimit, js.Conn().MaxPayload())
	i := slices.IndexFunc(tools, func(t *registered) bool { return t.spec.Gated() })
	if i < 0 {
		return nil
	}
	kv, err := layout.EnsureReleases(ctx, js, opts)
	if err != nil {
		return fmt.Errorf("worker: the release ledger, needed for gated tool %q: %w", tools[i].spec.Name, err)
	}
	w.ledger = release.NewLedger(kv)
	return nil
}

// advertise leases the tools' specs in the registry, when there is one.
func (w *Worker) advertise(ctx context.Context, tools []*registered) (*registry.Lease, error) {
	if w.cfg.Registry == nil {
		return nil, nil
	}
	specs := make([]windlass.Spec, len(tools))
	var rates map[string]limits.Rate
	for i, t := range tools {
		specs[i] = t.spec
		if !t.cfg.rate.IsZero() {
			if rates == nil {
				rates = map[string]limits.Rate{}
			}
			rates[t.spec.Name] = t.cfg.rate
		}
	}
	lease, err := w.cfg.Registry.Advertise(ctx, registry.Advertisement{WorkerID: w.cfg.ID, Specs: specs, Rates: rates, Replace: w.cfg.Replace})
	if err != nil {
		return nil, fmt.Errorf("worker: advertise: %w", err)
	}
	return lease, nil
}

// serve pulls and runs calls until ctx ends, then stops pulling and lets
// the running calls finish within the shutdown grace, canceling those that
// do not.
func (w *Worker) serve(ctx context.Context, tools []*registered, consumers []jetstream.Consumer, log *slog.Logger) {
	// Tools run under runCtx, which outlives ctx by the shutdown grace.
	runCtx, stopTools := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopTools(nil)
	// One ticker drives every running call's heartbeat; it stops once the
	// calls have (deferred after the drain below).
	beatsStop := make(chan struct{})
	var beating sync.WaitGroup
	beating.Go(func() { w.beats.run(w.cfg.Heartbeat, beatsStop) })
	defer func() { close(beatsStop); beating.Wait() }()
	// Calls waiting for their turn under a rate are handed back once no
	// pull request of this worker is open any more (below): handed back
	// sooner, a call could come straight back to this worker, and each
	// such delivery counts towards MaxDeliver.
	stopped, stopWaiting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWaiting()
	var pullers, calls sync.WaitGroup
	for i, t := range tools {
		p := &puller{w: w, ctx: ctx, stopped: stopped, runCtx: runCtx, cons: consumers[i], t: t, calls: &calls, log: log}
		pullers.Go(p.run)
	}

	<-ctx.Done()
	pullers.Wait() // no new calls start after this
	// Each puller's last pull request ended by unsubscribing its inbox; the
	// server forgets the request only once it has that. Until then it may
	// deliver a call to it, lost until the ack wait and counted towards
	// MaxDeliver. A flush makes the server process what was sent first.
	if err := w.cfg.JetStream.Conn().FlushTimeout(time.Second); err != nil {
		log.DebugContext(ctx, "worker: flushing the last pull requests' end failed", "error", err)
	}
	stopWaiting()
	drained := make(chan struct{})
	go func() { calls.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(w.cfg.ShutdownGrace):
		log.WarnContext(ctx, "worker: shutdown grace over; canceling running calls", "grace", w.cfg.ShutdownGrace)
		stopTools(errShutdown)
		<-drained
	}
	w.waiters.Wait() // settled already: only their goroutines' ends are left
	w.handlers.stop()
}

// withdraw takes the worker's tools out of the registry.
func (w *Worker) withdraw(ctx context.Context, lease *registry.Lease, log *slog.Logger) {
	if lease == nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retry.WriteTimeout)
	defer cancel()
	if err := lease.Withdraw(wctx); err != nil {
		log.WarnContext(ctx, "worker: withdraw from the registry failed; the lease will lapse", "error", err)
	}
}

// ensureConsumer creates the tool's shared durable consumer, or adopts the
// one that exists. It takes every call of the tool, on the protocol 1
// subject too while the calls stream has it (a migrated stream; see
// layout.EnsureStreams).
//
// The consumer's settings are its first creator's: an existing consumer
// keeps them, and a setting of this worker's that differs is logged (see
// adoptConsumer). Only its filter subjects follow the calls stream, since
// they decide which calls it takes at all. Config.UpdateConsumer rewrites
// the consumer with this worker's settings instead.
func (w *Worker) ensureConsumer(ctx context.Context, t *registered) (jetstream.Consumer, error) {
	want := jetstream.ConsumerConfig{
		Durable:       layout.ConsumerName(t.spec.Name),
		Description:   "Windlass workers of tool " + t.spec.Name,
		FilterSubject: layout.CallsOfTool(t.spec.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		// Unbounded for the server: the worker counts deliveries itself and
		// answers the one past Config.MaxDeliver (see bury), so a call whose
		// workers were all lost is answered and removed, not left behind.
		MaxDeliver:    -1,
		MaxAckPending: 20000,
	}
	if w.legacyQueued(ctx, t.spec.Name) {
		// Several filters: the unfiltered create request, which the shipped
		// permissions allow only during an upgrade.
		want.FilterSubjects, want.FilterSubject = []string{want.FilterSubject, layout.LegacyCallSubject(t.spec.Name)}, ""
	}
	js := w.cfg.JetStream
	if w.cfg.UpdateConsumer {
		c, err := js.CreateOrUpdateConsumer(ctx, layout.CallsStream, want)
		if err != nil {
			return nil, fmt.Errorf("worker: update consumer for tool %q: %w", t.spec.Name, err)
		}
		return c, nil
	}
	c, err := js.Consumer(ctx, layout.CallsStream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if c, err = js.CreateConsumer(ctx, layout.CallsStream, want); err == nil {
			return c, nil
		}
		if errors.Is(err, jetstream.ErrConsumerExists) { // another worker created it first, with other settings
			c, err = js.Consumer(ctx, layout.CallsStream, want.Durable)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker: ensure consumer for tool %q: %w", t.spec.Name, err)
	}
	return w.adoptConsumer(ctx, t, c, want)
}

// adoptConsumer keeps an existing consumer's settings, warning of each
// one that differs from want (this worker's), and updates only its filter
// subjects when the calls stream asks for others.
func (w *Worker) adoptConsumer(ctx context.Context, t *registered, c jetstream.Consumer, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	have := c.CachedInfo().Config
	for _, d := range []struct {
		setting       string
		existing, own any
	}{
		{"ack_wait", have.AckWait, want.AckWait},
		{"max_ack_pending", have.MaxAckPending, want.MaxAckPending},
		{"max_deliver", have.MaxDeliver, want.MaxDeliver},
	} {
		if d.existing != d.own {
			w.cfg.Logger.WarnContext(ctx, "worker: the tool's consumer keeps the settings of the worker that created it; this worker's differ (Config.UpdateConsumer rewrites them)",
				"worker", w.cfg.ID, "tool", t.spec.Name, "consumer", want.Durable, "setting", d.setting, "existing", d.existing, "own", d.own)
		}
	}
	if filters(have) == filters(want) {
		return c, nil
	}
	upd := have
	upd.FilterSubject, upd.FilterSubjects = want.FilterSubject, want.FilterSubjects
	c, err := w.cfg.JetStream.UpdateConsumer(ctx, layout.CallsStream, upd)
	if err != nil {
		return nil, fmt.Errorf("worker: update the filter subjects of the consumer for tool %q: %w", t.spec.Name, err)
	}
	return c, nil
}

// filters is a consumer's filter subjects, as one comparable string.
func filters(c jetstream.ConsumerConfig) string {
	return strings.Join(append([]string{c.FilterSubject}, c.FilterSubjects...), " ")
}

// followAckWait lowers the worker's ack wait to the shortest of its
// consumers', which may have been created by a worker with a shorter one:
// in-progress acks, and the cadence of heartbeats, must come within the
// ack wait the server applies. Called before the worker serves.
func (w *Worker) followAckWait(consumers []jetstream.Consumer) {
	for _, c := range consumers {
		if aw := c.CachedInfo().Config.AckWait; aw > 0 && aw < w.cfg.AckWait {
			w.cfg.AckWait = aw
			w.cfg.Heartbeat = max(min(w.cfg.Heartbeat, aw/3), 10*time.Millisecond)
		}
	}
}

// legacyQueued reports whether calls of tool wait on its protocol 1
// subject, in a calls stream migrated from protocol 1: the worker's
// consumer must take them too. When the stream cannot say, it answers yes:
// a call left behind is worse than a consumer with one filter too many.
func (w *Worker) legacyQueued(ctx context.Context, tool string) bool {
	if w.callsStream == nil || !layout.HasLegacyCalls(w.callsStream.CachedInfo().Config) {
		return false
	}
	info, err := w.callsStream.Info(ctx, jetstream.WithSubjectFilter(layout.LegacyCallSubject(tool)))
	return err != nil || len(info.State.Subjects) > 0
}

// errShutdown is the cause that ends a running tool's context when the
// shutdown grace is over.
var errShutdown = errors.New("worker: shutting down")

// maxFetchWait bounds one pull request; a new one follows at once.
const maxFetchWait = 5 * time.Second

// fetchWait is how long one pull request stays open on the server: at most
// half the ack wait, so that the open pull request of a worker that stalls
// (paused, swapped out) has expired before its calls are redelivered;
// otherwise the server could hand a redelivery to that same stalled
// worker, and the call would wait another ack wait.
func (w *Worker) fetchWait() time.Duration { return min(maxFetchWait, w.cfg.AckWait/2) }

// puller feeds one tool's calls to handlers until ctx ends. It pulls only
// as many calls as it has free slots (per tool and per process), so no call
// waits in a client-side buffer with its ack timer running: every delivered
// call starts at once and is kept alive by in-progress acks.
type puller struct {
	w       *Worker
	ctx     context.Context // pulling stops when it ends
	stopped context.Context // ends once the worker's pulling has stopped
	runCtx  context.Context // the calls', which outlives ctx by the shutdown grace
	cons    jetstream.Consumer
	t       *registered
	calls   *sync.WaitGroup // the handlers' goroutines and the calls until settled
	log     *slog.Logger

	toolSlots chan struct{}
}

// run pulls until the puller's context ends, retrying failed pulls.
func (p *puller) run() {
	p.toolSlots = make(chan struct{}, p.t.cfg.concurrency)
	waits := retry.Policy{Initial: 100 * time.Millisecond}.Waits()
	for failures := 0; p.ctx.Err() == nil; {
		n, ok := p.reserve()
		if !ok {
			return
		}
		err := p.fetch(n)
		if err == nil || p.ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			failures = 0
			waits.Reset()
			continue
		}
		failures++
		p.log.WarnContext(p.ctx, "worker: pull failed; retrying", "tool", p.t.spec.Name, "error", p.repair(err), "failures", failures)
		retry.Sleep(p.ctx, waits.Next())
	}
}

// reserve takes one slot of each kind, waiting for them, then as many
// more as are free right now, up to a batch; false when ctx ended first.
func (p *puller) reserve() (int, bool) {
	select {
	case p.toolSlots <- struct{}{}:
	case <-p.ctx.Done():
		return 0, false
	}
	select {
	case p.w.slots <- struct{}{}:
	case <-p.ctx.Done():
		<-p.toolSlots
		return 0, false
	}
	n, batchMax := 1, min(p.t.cfg.concurrency, 256)
	for n < batchMax && tryAcquire(p.toolSlots) {
		if !tryAcquire(p.w.slots) {
			<-p.toolSlots
			break
		}
		n++
	}
	return n, true
}

// release gives back one slot of each kind.
func (p *puller) release() { <-p.w.slots; <-p.toolSlots }

// fetch pulls up to n calls and hands each to a handler; the slots of
// those that did not come are released.
func (p *puller) fetch(n int) error {
	fetchCtx, cancel := context.WithTimeout(p.ctx, p.w.fetchWait())
	defer cancel()
	used := 0
	defer func() {
		for range n - used {
			p.release()
		}
	}()
	batch, err := p.cons.Fetch(n, jetstream.FetchContext(fetchCtx))
	if err != nil {
		return err
	}
	for msg := range batch.Messages() {
		used++
		p.take(msg)
	}
	return batch.Error()
}

// take hands one pulled call to a handler, or back to the stream when the
// worker is shutting down (another worker takes it at once).
func (p *puller) take(msg jetstream.Msg) {
	w := p.w
	if p.ctx.Err() != nil {
		d := &delivery{ctx: p.runCtx, msg: msg, t: p.t, log: p.log, free: p.release, done: func() {}}
		w.apply(d, outcome{verb: verbRequeue, count: countRequeued})
		return
	}
	// calls counts the handler's goroutine and, apart, the call until it
	// is settled, which may be later.
	p.calls.Add(2)
	w.handlers.goOrPool(func() {
		defer p.calls.Done()
		w.handle(p.runCtx, p.stopped, msg, p.t, p.log, p.release, p.calls.Done)
	})
}

// repair recreates what a failed pull found missing (the stream or the
// consumer, deleted by an operator or a stream reset) and returns the error
// to report.
func (p *puller) repair(err error) error {
	if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	if rerr := layout.EnsureStreams(p.ctx, p.w.cfg.JetStream, layout.AllStreams(layout.StreamOptions{Replicas: p.w.cfg.Replicas})...); rerr != nil {
		return rerr
	}
	c, rerr := p.w.ensureConsumer(p.ctx, p.t)
	if rerr != nil {
		return rerr
	}
	p.cons = c
	return err
}

func tryAcquire(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// readCancellation reads a call's cancellation from the cancels stream.
func (w *Worker) readCancellation(ctx context.Context, callID string) (windlass.Cancellation, bool) {
	m, err := w.cancelsStream.GetLastMsgForSubject(ctx, layout.CancelSubject(callID))
	if err != nil {
		return windlass.Cancellation{}, false
	}
	var rec windlass.Cancellation
	if json.Unmarshal(m.Data, &rec) != nil || rec.CallID != callID {
		return windlass.Cancellation{}, false
	}
	return rec, true
}
