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
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
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
	// Replicas of the streams the worker creates when they are missing.
	// Default 1; use 3 on a three-node cluster.
	Replicas int
	// Releases verifies the approval service's release on calls of tools
	// that require approval. Nil refuses every such call (fail closed).
	// Releases are single-use: the worker records each use in the release
	// ledger (a JetStream key-value bucket, layout.ReleasesBucket), which it
	// creates when it is missing.
	Releases *release.Verifier
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
	concurrency  int
	maxQueueWait time.Duration
	retry        RetryPolicy
}

// WithConcurrency bounds the calls of this tool running at once in this
// worker. Default 256.
func WithConcurrency(n int) ToolOption { return func(c *toolConfig) { c.concurrency = n } }

// WithMaxQueueWait bounds how long a call may wait in the queue before it
// starts (schedule-to-start). A call that waited longer is answered timeout
// without running. Only the first delivery is bounded: a retry or a
// redelivery after a lost worker follows a start. Zero (the default) means
// no bound beyond the deadline.
func WithMaxQueueWait(d time.Duration) ToolOption { return func(c *toolConfig) { c.maxQueueWait = d } }

// registered is a tool with its settings and derived values.
type registered struct {
	tool windlass.Tool
	spec windlass.Spec
	hash string
	cfg  toolConfig
}

// Worker pulls and runs the calls of its registered tools. Register every
// tool before Run; a Worker runs once.
type Worker struct {
	cfg Config

	mu      sync.Mutex
	tools   map[string]*registered
	order   []string
	started bool

	slots    chan struct{} // process-wide concurrency
	handlers *handlers     // takes calls in and settles them
	beats    beats         // the running calls' heartbeats, one ticker for all
	stats    stats

	tracer  telemetry.Tracer
	metrics *telemetry.WorkerMetrics // nil: metrics off

	cancels                                    *cancellations
	resultsStream, eventsStream, cancelsStream jetstream.Stream

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
	return &Worker{cfg: cfg, tools: map[string]*registered{}, slots: make(chan struct{}, cfg.MaxConcurrency), cancels: newCancellations(),
		handlers: newHandlers(maxHandlers), releases: releases,
		tracer: telemetry.NewTracer(cfg.TracerProvider), metrics: telemetry.NewWorkerMetrics(cfg.MeterProvider)}, nil
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
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	w.started = true
	tools := make([]*registered, 0, len(w.order))
	for _, n := range w.order {
		tools = append(tools, w.tools[n])
	}
	w.mu.Unlock()
	if len(tools) == 0 {
		return errors.New("worker: no tools registered")
	}
	log := w.cfg.Logger.With("worker", w.cfg.ID)

	js := w.cfg.JetStream
	opts := layout.StreamOptions{Replicas: w.cfg.Replicas}
	if err := layout.EnsureStreams(ctx, js, layout.AllStreams(opts)...); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	var err error
	if w.resultsStream, err = js.Stream(ctx, layout.ResultsStream); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.eventsStream, err = js.Stream(ctx, layout.EventsStream); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.cancelsStream, err = js.Stream(ctx, layout.CancelsStream); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	for _, t := range tools {
		if t.spec.RequiresApproval {
			kv, err := layout.EnsureReleases(ctx, js, opts)
			if err != nil {
				return fmt.Errorf("worker: the release ledger, needed for gated tool %q: %w", t.spec.Name, err)
			}
			w.ledger = release.NewLedger(kv)
			break
		}
	}
	stopFollowing, err := w.cancels.follow(ctx, js, log)
	if err != nil {
		return err
	}
	defer stopFollowing()
	consumers := make([]jetstream.Consumer, len(tools))
	for i, t := range tools {
		c, err := w.ensureConsumer(ctx, t)
		if err != nil {
			return err
		}
		consumers[i] = c
	}

	var lease *registry.Lease
	if w.cfg.Registry != nil {
		specs := make([]windlass.Spec, len(tools))
		for i, t := range tools {
			specs[i] = t.spec
		}
		lease, err = w.cfg.Registry.Advertise(ctx, registry.Advertisement{WorkerID: w.cfg.ID, Specs: specs, Replace: w.cfg.Replace})
		if err != nil {
			return fmt.Errorf("worker: advertise: %w", err)
		}
	}
	log.InfoContext(ctx, "worker: serving", "tools", w.order)

	// Tools run under runCtx, which outlives ctx by the shutdown grace.
	runCtx, stopTools := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopTools(nil)
	// One ticker drives every running call's heartbeat; it stops once the
	// calls have (deferred after the drain below).
	beatsStop := make(chan struct{})
	var beating sync.WaitGroup
	beating.Go(func() { w.beats.run(w.cfg.Heartbeat, beatsStop) })
	defer func() { close(beatsStop); beating.Wait() }()
	var pullers, calls sync.WaitGroup
	for i, t := range tools {
		pullers.Go(func() { w.pull(ctx, runCtx, consumers[i], t, &calls, log) })
	}

	<-ctx.Done()
	pullers.Wait() // no new calls start after this
	// Each puller's last pull request ended by unsubscribing its inbox; the
	// server forgets the request only once it has that. Until then it may
	// deliver a call to it, lost until the ack wait and counted towards
	// MaxDeliver. A flush makes the server process what was sent first.
	if err := js.Conn().FlushTimeout(time.Second); err != nil {
		log.Debug("worker: flushing the last pull requests' end failed", "error", err)
	}
	drained := make(chan struct{})
	go func() { calls.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(w.cfg.ShutdownGrace):
		log.Warn("worker: shutdown grace over; canceling running calls", "grace", w.cfg.ShutdownGrace)
		stopTools(errShutdown)
		<-drained
	}
	w.handlers.stop()
	if lease != nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := lease.Withdraw(wctx); err != nil {
			log.Warn("worker: withdraw from the registry failed; the lease will lapse", "error", err)
		}
	}
	log.Info("worker: stopped")
	return nil
}

// ensureConsumer creates or updates the tool's shared durable consumer.
func (w *Worker) ensureConsumer(ctx context.Context, t *registered) (jetstream.Consumer, error) {
	c, err := w.cfg.JetStream.CreateOrUpdateConsumer(ctx, layout.CallsStream, jetstream.ConsumerConfig{
		Durable:       layout.ConsumerName(t.spec.Name),
		Description:   "Windlass workers of tool " + t.spec.Name,
		FilterSubject: layout.CallSubject(t.spec.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		// Unbounded for the server: the worker counts deliveries itself and
		// answers the one past Config.MaxDeliver (see bury), so a call whose
		// workers were all lost is answered and removed, not left behind.
		MaxDeliver:    -1,
		MaxAckPending: 20000,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: ensure consumer for tool %q: %w", t.spec.Name, err)
	}
	return c, nil
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

// pull feeds one tool's calls to handlers until ctx ends. It pulls only as
// many calls as it has free slots (per tool and per process), so no call
// waits in a client-side buffer with its ack timer running: every delivered
// call starts at once and is kept alive by in-progress acks.
func (w *Worker) pull(ctx, runCtx context.Context, cons jetstream.Consumer, t *registered, calls *sync.WaitGroup, log *slog.Logger) {
	toolSlots := make(chan struct{}, t.cfg.concurrency)
	release := func() { <-w.slots; <-toolSlots }
	batchMax := min(t.cfg.concurrency, 256)
	failures := 0
	for ctx.Err() == nil {
		// Reserve one slot of each kind (waiting), then as many more as are
		// free right now.
		select {
		case toolSlots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			<-toolSlots
			return
		}
		n := 1
		for n < batchMax && tryAcquire(toolSlots) {
			if !tryAcquire(w.slots) {
				<-toolSlots
				break
			}
			n++
		}
		fetchCtx, cancel := context.WithTimeout(ctx, w.fetchWait())
		batch, err := cons.Fetch(n, jetstream.FetchContext(fetchCtx))
		used := 0
		if err == nil {
			for msg := range batch.Messages() {
				used++
				if ctx.Err() != nil {
					_ = msg.Nak() // shutting down: another worker takes it at once
					release()
					continue
				}
				// calls counts the handler's goroutine and, apart, the
				// call until it is settled, which may be later.
				calls.Add(2)
				w.handlers.goOrPool(func() {
					defer calls.Done()
					w.handle(runCtx, msg, t, log, func() { release(); calls.Done() })
				})
			}
			err = batch.Error()
		}
		cancel()
		for range n - used {
			release()
		}
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			failures++
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrStreamNotFound) {
				// Deleted under us (an operator, a stream reset): recreate
				// what is missing and go on pulling.
				if rerr := layout.EnsureStreams(ctx, w.cfg.JetStream, layout.AllStreams(layout.StreamOptions{Replicas: w.cfg.Replicas})...); rerr != nil {
					err = rerr
				} else if c, rerr := w.ensureConsumer(ctx, t); rerr != nil {
					err = rerr
				} else {
					cons = c
				}
			}
			log.Warn("worker: pull failed; retrying", "tool", t.spec.Name, "error", err, "failures", failures)
			select {
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)):
			case <-ctx.Done():
			}
			continue
		}
		failures = 0
	}
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
