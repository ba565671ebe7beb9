package dispatcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// Defaults of [Config].
const (
	DefaultQueueAllowance = 30 * time.Second
	DefaultMaxWait        = 15 * time.Minute
	DefaultApprovalWait   = time.Hour
)

// ErrNoResult is returned by [Dispatcher.Result] when the call has no result
// yet (or none within the results stream's retention).
var ErrNoResult = errors.New("dispatcher: no result for the call yet")

// ErrClosed is returned by calls on a closed dispatcher.
var ErrClosed = errors.New("dispatcher: closed")

// Config configures a [Dispatcher]. Zero values mean the documented defaults.
type Config struct {
	// Conn is the NATS connection. Required; never closed by the dispatcher.
	Conn *nats.Conn
	// Registry is the fleet's registry; the dispatcher watches it. Required.
	Registry *registry.Registry
	// ID names this dispatcher instance in result subjects. It must be
	// unique among live instances. Default: random.
	ID string
	// QueueAllowance is added to a tool's timeout to bound a call that has
	// no deadline of its own: time to wait for a free worker. Default 30s.
	QueueAllowance time.Duration
	// ApprovalWait is added to the bound of a call of a gated tool that
	// has no deadline of its own: time for a human to decide. Default 1h,
	// the approval service's default window.
	ApprovalWait time.Duration
	// MaxWait bounds [Dispatcher.Wait] for a call submitted elsewhere when
	// ctx has no deadline. Default 15m.
	MaxWait time.Duration
	// Replicas of the streams the dispatcher creates when they are missing.
	// Default 1.
	Replicas int
	// InlineLimit is the largest call message sent inline, in bytes;
	// the arguments of a larger call travel by reference, through the
	// fleet's object store (see PROTOCOL.md, "Payloads by reference").
	// Default 256 KiB (PayloadLimit when that is less); never above the
	// NATS server's max payload.
	InlineLimit int64
	// PayloadLimit is the largest arguments, and the largest result value,
	// the dispatcher sends or fetches by reference, in bytes. Larger
	// arguments are refused payload_too_large before anything is stored;
	// a larger result is answered result_too_large. Default 64 MiB.
	PayloadLimit int64
	// Limits are the fleet's admission limits per tool × key (see package
	// limits): checked before a call is published, on counts shared with
	// every dispatcher on the same Redis. The zero value is the
	// protective defaults; limits.Unlimited() turns them off.
	//
	// Limits.MaxQueuedCalls bounds the calls stream: the calls of every
	// tool queued or running, together. Past it the NATS server refuses a
	// new call and the caller gets overloaded, with a retry-after. A
	// bound set there (a positive number, or limits.NoLimit for none) is
	// applied by New to the stream, one that exists too (logged at info
	// when it changes), so every long-running dispatcher of a fleet
	// should be given the same one. 0 creates a missing stream with
	// limits.DefaultMaxQueuedCalls (100,000) and leaves an existing
	// stream's bound as it is: what a short-lived dispatcher (a CLI
	// command) must do, not to undo the operator's bound.
	Limits limits.Config
	// Logger receives the dispatcher's logs. Default: discard.
	Logger *slog.Logger
	// TracerProvider traces each call's publish (a producer span, child of
	// the caller's span in ctx, whose W3C context travels in the call's
	// headers). Default: the global provider; while no SDK is installed
	// there, tracing is off and costs nothing.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the dispatcher's metrics (calls by tool and
	// outcome, call duration, calls in flight, live workers per tool,
	// registry staleness). Default: the global provider as it is when New
	// runs; off while no SDK is installed there.
	MeterProvider metric.MeterProvider
}

// Dispatcher submits calls to the fleet and collects their results. It is
// safe for concurrent use; create one per process and [Dispatcher.Close] it.
type Dispatcher struct {
	cfg      Config
	js       jetstream.JetStream
	calls    jetstream.Stream
	results  jetstream.Stream
	events   jetstream.Stream
	cancels  jetstream.Stream
	dead     jetstream.Stream
	refusals jetstream.Stream
	payloads *payload.Store // arguments and results by reference
	inline   int64          // the largest call message sent inline
	view     *registry.View
	sub      *nats.Subscription

	admission *admission // Config.Limits, applied
	// callsBound is the calls stream's MaxMsgs as New found it (-1:
	// none), for the refusal of a call it had no room for.
	callsBound int64

	tracer            telemetry.Tracer
	metrics           *telemetry.DispatcherMetrics // nil: metrics off
	unobserveRegistry func()

	originHeader []string // {cfg.ID}: every call's origin header value, shared

	pending  sync.Map // call id -> chan windlass.ToolResult (buffered 1): the Call in flight here
	waiters  sync.Map // call id -> chan windlass.ToolResult (buffered 1): a Wait here
	counting sync.Map // call id -> *counted: calls published here, in flight in the metrics
	schemas  sync.Map // spec hash -> *windlass.ArgumentsSchema

	approvalSubjects sync.Map // tool name -> its approvals subject

	unclaimed atomic.Int64
	closed    atomic.Bool
	done      chan struct{} // closed by Close; waiting calls return ErrClosed

	sweeperDone chan struct{}
}

// withDefaults returns c with every zero field set to its default: the one
// place the dispatcher's defaults are decided.
func (c Config) withDefaults() Config {
	c.ID = cmp.Or(c.ID, "d"+strings.ToLower(rand.Text()[:12]))
	c.QueueAllowance = cmp.Or(c.QueueAllowance, DefaultQueueAllowance)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.ApprovalWait = cmp.Or(c.ApprovalWait, DefaultApprovalWait)
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
	case c.Conn == nil:
		return errors.New("dispatcher: Config.Conn is nil: pass a *nats.Conn")
	case c.Registry == nil:
		return errors.New("dispatcher: Config.Registry is nil: pass a *registry.Registry")
	case c.QueueAllowance < 0:
		return fmt.Errorf("dispatcher: Config.QueueAllowance must not be negative, got %s", c.QueueAllowance)
	case c.MaxWait < 0:
		return fmt.Errorf("dispatcher: Config.MaxWait must not be negative, got %s", c.MaxWait)
	case c.ApprovalWait < 0:
		return fmt.Errorf("dispatcher: Config.ApprovalWait must not be negative, got %s", c.ApprovalWait)
	case c.InlineLimit < 0:
		return fmt.Errorf("dispatcher: Config.InlineLimit must not be negative, got %d", c.InlineLimit)
	case c.PayloadLimit < c.InlineLimit:
		return fmt.Errorf("dispatcher: Config.PayloadLimit must be at least InlineLimit (%d), got %d", c.InlineLimit, c.PayloadLimit)
	case windlass.ValidateName(c.ID) != nil:
		return fmt.Errorf("dispatcher: Config.ID %q must match %s (it is a subject token)", c.ID, windlass.NamePattern)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("dispatcher: Config.Limits: %w", err)
	}
	return nil
}

// New connects a dispatcher: it ensures the calls, results and approvals
// streams, reads the registry into memory and subscribes to its results.
func New(ctx context.Context, cfg Config) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: jetstream: %w", err)
	}
	opts := layout.StreamOptions{Replicas: cfg.Replicas, MaxQueuedCalls: cfg.Limits.MaxQueuedCalls}
	if err := layout.EnsureStreams(ctx, js, layout.AllStreams(opts)...); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if cfg.Limits.MaxQueuedCalls != 0 {
		// The dispatchers admit calls, so they, and only they, apply a
		// bound they were given to a calls stream that exists.
		// Not fatal: the stream takes calls without it. Under the
		// shipped NATS permissions (deploy/nats/accounts.conf) only the
		// approval role may update the stream: the server refuses the
		// request, which then times out once (not asked again), and the
		// warning names the grant.
		bound, err := layout.BoundCalls(ctx, js, opts)
		if err != nil {
			cfg.Logger.WarnContext(ctx, "dispatcher: could not bound the calls stream; it keeps its bound",
				"stream", layout.CallsStream, "max_queued_calls", cfg.Limits.MaxQueuedCalls, "error", err,
				"hint", "grant the dispatcher's NATS user $JS.API.STREAM.UPDATE."+layout.CallsStream+", or run: nats stream edit "+layout.CallsStream+" --max-msgs N --discard new")
		}
		if bound != nil {
			cfg.Logger.InfoContext(ctx, "dispatcher: bounded the calls stream",
				"max_msgs_was", bound.FromMaxMsgs, "max_msgs", bound.ToMaxMsgs, "discard_was", bound.FromDiscard.String(), "discard", bound.ToDiscard.String())
		}
	}
	obs, err := layout.EnsurePayloads(ctx, js, opts)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	d := &Dispatcher{cfg: cfg, js: js, done: make(chan struct{}), sweeperDone: make(chan struct{}), originHeader: []string{cfg.ID},
		payloads: payload.New(obs, cfg.Conn), inline: min(cfg.InlineLimit, cfg.Conn.MaxPayload())}
	for name, s := range map[string]*jetstream.Stream{
		layout.CallsStream: &d.calls, layout.ResultsStream: &d.results, layout.EventsStream: &d.events, layout.CancelsStream: &d.cancels, layout.DeadStream: &d.dead,
		layout.RefusalsStream: &d.refusals,
	} {
		if *s, err = js.Stream(ctx, name); err != nil {
			return nil, fmt.Errorf("dispatcher: stream %s: %w", name, err)
		}
	}
	d.callsBound = d.calls.CachedInfo().Config.MaxMsgs
	d.sub, err = cfg.Conn.Subscribe(layout.ResultInbox(cfg.ID), d.onResult)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: subscribe to results: %w", err)
	}
	// Results may arrive in bursts from many workers: no slow-consumer drops.
	_ = d.sub.SetPendingLimits(-1, -1)
	view, err := cfg.Registry.Watch(ctx)
	if err != nil {
		_ = d.sub.Unsubscribe()
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	d.view = view
	var enforcer *limits.Enforcer
	if !unlimited(cfg.Limits) {
		enforcer = cfg.Registry.Limits()
	}
	d.admission = newAdmission(cfg.Limits, enforcer)
	d.tracer = telemetry.NewTracer(cfg.TracerProvider)
	d.metrics = telemetry.NewDispatcherMetrics(cfg.MeterProvider)
	d.unobserveRegistry = d.observeRegistry()
	go d.sweepAfterReconnects()
	return d, nil
}

// PayloadLimit is the largest arguments the dispatcher sends, and the
// largest result value it fetches, by reference (Config.PayloadLimit).
func (d *Dispatcher) PayloadLimit() int64 { return d.cfg.PayloadLimit }

// MaxArgumentValues is the most JSON values the arguments of a call of
// any tool in the dispatcher's view may hold (each tool's
// [windlass.Spec.ArgumentValueLimit]; [windlass.DefaultMaxArgumentValues]
// at least): no call's arguments may hold more. The HTTP API bounds a
// request body's values by it before decoding the body.
func (d *Dispatcher) MaxArgumentValues() int { return d.view.MaxArgumentValues() }

// ID returns the dispatcher instance's id.
func (d *Dispatcher) ID() string { return d.cfg.ID }

// Close unsubscribes and stops following the registry. Calls waiting on
// this instance return ErrClosed.
func (d *Dispatcher) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	close(d.done)
	<-d.sweeperDone
	err := d.sub.Unsubscribe()
	d.admission.close()
	d.dropCounted()
	d.unobserveRegistry()
	d.view.Close()
	return err
}

// Staleness is how long ago the dispatcher's view of the registry was last
// refreshed; it grows while Redis is unreachable.
func (d *Dispatcher) Staleness() time.Duration { return d.view.Staleness() }

// Unclaimed counts results received with no caller waiting on this
// instance: a later execution of a call already answered, or a call whose
// caller gave up. They stay in the results stream and are otherwise dropped.
func (d *Dispatcher) Unclaimed() int64 { return d.unclaimed.Load() }

// onResult delivers a result to the caller waiting on this instance.
func (d *Dispatcher) onResult(m *nats.Msg) {
	r, err := decodeResult("", m.Data)
	if err != nil {
		d.cfg.Logger.Warn("dispatcher: undecodable result dropped", "subject", m.Subject, "error", err)
		return
	}
	d.deliver(r)
}

// deliver hands r to the caller waiting for it on this instance, if any.
func (d *Dispatcher) deliver(r windlass.ToolResult) {
	d.countResult(r)
	d.admission.ended(r.CallID)
	ch, ok := d.pending.LoadAndDelete(r.CallID)
	if ok {
		ch.(chan windlass.ToolResult) <- r // buffered 1, and only the one LoadAndDelete winner sends
	}
	if w, waiting := d.waiters.LoadAndDelete(r.CallID); waiting {
		w.(chan windlass.ToolResult) <- r
		ok = true
	}
	if !ok {
		d.unclaimed.Add(1)
	}
}

// sweepAfterReconnects looks up, after every reconnect to NATS, the result
// of each call waiting on this instance: a result published while the
// connection was down reached the results stream but not this instance's
// subscription. It looks again sweepAgainAfter later, for a result a
// worker stored just before this instance's subscription was back but
// after the first look. On every tick it also counts as timed out the
// calls whose result is overdue (see expireCounted).
func (d *Dispatcher) sweepAfterReconnects() {
	defer close(d.sweeperDone)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	seen := d.cfg.Conn.Stats().Reconnects
	var again time.Time // when to sweep once more; zero: not due
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.expireCounted(time.Now())
		d.admission.expire(time.Now())
		if !d.cfg.Conn.IsConnected() {
			continue
		}
		switch n := d.cfg.Conn.Stats().Reconnects; {
		case n != seen:
			seen = n
			d.sweep()
			again = time.Now().Add(sweepAgainAfter)
		case !again.IsZero() && time.Now().After(again):
			again = time.Time{}
			d.sweep()
		}
	}
}

// sweepAgainAfter is how long after a reconnect the waiting calls' results
// are looked up a second time.
const sweepAgainAfter = 2 * time.Second

// sweep fetches the stored result of every call waiting on this instance,
// and of every call published here whose outcome the metrics await.
// A look-up that fails (the server still recovering its streams after a
// restart) is tried again, with backoff, for up to sweepTimeout.
func (d *Dispatcher) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	go func() { // Close ends a sweep at once
		select {
		case <-d.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var again []string // look-ups that failed, asked again with backoff
	found := 0
	look := func(id string) {
		r, err := d.Result(ctx, id)
		switch {
		case err == nil:
			d.deliver(r)
			found++
		case !errors.Is(err, ErrNoResult):
			again = append(again, id)
		}
	}
	d.pending.Range(func(k, _ any) bool {
		look(k.(string))
		return ctx.Err() == nil
	})
	d.counting.Range(func(k, _ any) bool {
		if _, waiting := d.pending.Load(k); !waiting {
			look(k.(string))
		}
		return ctx.Err() == nil
	})
	d.admission.slots.Range(func(k, _ any) bool {
		_, waiting := d.pending.Load(k)
		_, counting := d.counting.Load(k)
		if !waiting && !counting {
			look(k.(string))
		}
		return ctx.Err() == nil
	})
	for waits := (retry.Policy{Initial: 100 * time.Millisecond}).Waits(); len(again) > 0 && retry.Sleep(ctx, waits.Next()); {
		ids := again
		again = nil
		for _, id := range ids {
			_, waiting := d.pending.Load(id)
			_, counting := d.counting.Load(id)
			_, holding := d.admission.slots.Load(id)
			if waiting || counting || holding {
				look(id)
			}
		}
	}
	d.cfg.Logger.InfoContext(ctx, "dispatcher: reconnected; looked up the results of waiting calls", "found", found, "unanswered_lookups", len(again))
}

// sweepTimeout bounds one sweep.
const sweepTimeout = 30 * time.Second
