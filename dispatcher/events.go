package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
)

// publishQueued records that the fleet accepted a gated call, and waits
// until the events stream has stored it: its message goes to the approval
// service, not the calls stream, so Cancel, Status and Watch on any
// instance find it by this event (and a resubmit of a caller-chosen id past
// the duplicate window), and it must be there once Submit returns or Call
// waits. A failure is logged, not returned: the call is
// accepted all the same. at is taken before the call was published, so
// (on one clock) the queued time never follows a worker's start.
//
// The record is written create-only: the first submit of an id writes
// it, and a later one never overwrites what the first said (its tool,
// arguments hash and origin). When one is there already, publishQueued
// returns it with taken true.
func (d *Dispatcher) publishQueued(ctx context.Context, p *prepared, at time.Time) (existing windlass.Event, taken bool) {
	call := p.call
	e := windlass.Event{CallID: call.ID, Kind: windlass.EventQueued, Tool: call.Name, Time: at, Deadline: call.Deadline, Origin: d.cfg.ID, ArgsHash: p.argsHash, Key: call.Key}
	data, err := json.Marshal(e)
	if err != nil {
		return windlass.Event{}, false
	}
	// Stored even when the caller gives up meanwhile (the call is accepted
	// and runs; a cancellation needs this record to find it), within the
	// client's default publish timeout.
	ctx = context.WithoutCancel(ctx)
	_, err = d.js.PublishMsg(ctx, &nats.Msg{Subject: layout.EventSubject(call.ID, string(e.Kind)), Data: data,
		Header: nats.Header{layout.HeaderProtocol: []string{protocolVersion}}}, jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		if q, err := d.readEvent(ctx, call.ID, windlass.EventQueued); err == nil {
			return q, true
		}
		return windlass.Event{}, false
	}
	if err != nil {
		d.cfg.Logger.WarnContext(ctx, "dispatcher: could not record the call as queued; Cancel, Status and Watch may not find it", "call_id", call.ID, "error", err)
	}
	return windlass.Event{}, false
}

// lastEvent reads a call's latest event of one kind: false when the
// stream has none, an error when it cannot say (NATS down or restarting,
// the stream not recovered yet), which is never "none".
func (d *Dispatcher) lastEvent(ctx context.Context, callID string, kind windlass.EventKind) (windlass.Event, bool, error) {
	e, err := d.readEvent(ctx, callID, kind)
	switch {
	case err == nil:
		return e, true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return windlass.Event{}, false, nil
	}
	return windlass.Event{}, false, fmt.Errorf("dispatcher: read the %s event of %q: %w", kind, callID, err)
}

// readEvent reads a call's latest event of one kind, in one request bounded
// by retry.ReadTimeout: jetstream.ErrMsgNotFound when there is none.
func (d *Dispatcher) readEvent(ctx context.Context, callID string, kind windlass.EventKind) (windlass.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	m, err := d.events.GetLastMsgForSubject(ctx, layout.EventSubject(callID, string(kind)))
	if err != nil {
		return windlass.Event{}, err
	}
	var e windlass.Event
	if json.Unmarshal(m.Data, &e) != nil || e.CallID != callID {
		return windlass.Event{}, jetstream.ErrMsgNotFound // another call's (a token collision) or foreign
	}
	return e, nil
}

// Watch follows a call's life from any dispatcher instance: the events so
// far (queued, started, progress, retrying), then the live ones, and last a
// finished event carrying the result, after which the sequence ends. It is
// bounded like [Dispatcher.Wait]; when the wait ends without a result, or
// the call id is invalid, the sequence ends with the error.
//
// The queued event, made from the call's record (see PROTOCOL.md, "Call
// records"), comes first; every event stored before
// the result was seen comes before finished. An attempt that finished
// within a few milliseconds has no stored started event (see PROTOCOL.md,
// Events); Watch yields one made from the result's StartedAt instead.
//
// Progress events are the latest report at each of the worker's
// heartbeats, not every report the tool made.
//
// A Watch holds one consumer of the events stream on the NATS server,
// deleted when the sequence ends, whatever ends it (the result, an error,
// ctx, the caller's break); should the process die first, the server drops
// it after 30 s without a pull.
func (d *Dispatcher) Watch(ctx context.Context, callID string) iter.Seq2[windlass.Event, error] {
	return func(yield func(windlass.Event, error) bool) {
		if err := windlass.ValidateCallID(callID); err != nil {
			yield(windlass.Event{}, fmt.Errorf("dispatcher: watch: %w", err))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w := &watch{d: d, callID: callID, events: make(chan storedEvent, 64), order: eventOrder{yield: yield}}
		stopFollowing, err := w.follow(ctx)
		if err != nil {
			yield(windlass.Event{}, fmt.Errorf("dispatcher: watch %q: %w", callID, err))
			return
		}
		defer stopFollowing()
		// The call's record is its queued event; read after the follower
		// started, so no event is missed (best effort: see eventOrder).
		if k, err := d.find(ctx, callID); err == nil && k.found && !w.order.emit(queuedEvent(callID, k.rec)) {
			return
		}
		finished := make(chan waited, 1)
		go func() {
			r, err := d.Wait(ctx, callID)
			finished <- waited{r, err}
		}()
		defer func() { cancel(); <-finished }()
		w.run(ctx, finished)
	}
}

// storedEvent is one message of a call's events, decoded or not: its
// sequence tells how far the follower has come.
type storedEvent struct {
	e   windlass.Event
	ok  bool
	seq uint64
}

// waited is what Wait returned for a watched call.
type waited struct {
	r   windlass.ToolResult
	err error
}

// watch is one Watch sequence: the follower of the call's events and the
// order it yields them in.
type watch struct {
	d      *Dispatcher
	callID string
	events chan storedEvent // from the follower
	order  eventOrder
	seen   uint64 // the stream sequence the follower has handed over
}

// follow starts an ordered consumer of the call's events feeding w.events;
// stop ends it and deletes the consumer.
func (w *watch) follow(ctx context.Context) (stop func(), err error) {
	cons, err := w.d.events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{layout.EventsOfCall(w.callID)},
		InactiveThreshold: watchInactive,
	})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var s storedEvent
		if meta, err := m.Metadata(); err == nil {
			s.seq = meta.Sequence.Stream
		}
		s.ok = json.Unmarshal(m.Data(), &s.e) == nil && s.e.CallID == w.callID
		select {
		case w.events <- s:
		case <-ctx.Done():
		}
	}, jetstream.PullExpiry(watchPullExpiry))
	if err != nil {
		w.d.deleteWatchConsumer(ctx, w.callID, cons)
		return nil, err
	}
	return func() {
		cc.Stop()
		<-cc.Closed()
		// After the consuming stopped, so the name is the consumer's
		// last: an ordered consumer recreates itself under a new name on
		// a reset.
		w.d.deleteWatchConsumer(ctx, w.callID, cons)
	}, nil
}

// take yields one stored event in order; false when the caller stopped.
func (w *watch) take(s storedEvent) bool {
	w.seen = max(w.seen, s.seq)
	return !s.ok || w.order.emit(s.e)
}

// run yields the call's events until its result (or Wait's error) is in,
// then ends the sequence (see end).
func (w *watch) run(ctx context.Context, finished chan waited) {
	for {
		select {
		case s := <-w.events:
			if !w.take(s) {
				return
			}
		case <-w.order.hold:
			if !w.order.flush() {
				return
			}
		case res := <-finished:
			finished <- res // for the deferred receive
			if res.err != nil {
				w.order.yield(windlass.Event{}, res.err)
				return
			}
			w.end(ctx, res.r)
			return
		}
	}
}

// end yields, once the result is in, the events stored before it, the
// queued event if it was not seen, a started event made from the result
// when the attempt had none, and last the finished event.
func (w *watch) end(ctx context.Context, r windlass.ToolResult) {
	if !w.catchUp(ctx) {
		return
	}
	o := &w.order
	if !o.queuedDone {
		// Best effort: a record that cannot be read now is left out, not
		// waited for.
		if k, err := w.d.find(ctx, w.callID); err == nil && k.found && !o.emit(queuedEvent(w.callID, k.rec)) {
			return
		}
	}
	if !o.flush() {
		return
	}
	if !r.StartedAt.IsZero() && o.started < r.Attempt {
		// The attempt ended within the worker's startedDelay, before its
		// started event was due: the result records the start.
		if !o.emit(windlass.Event{CallID: w.callID, Kind: windlass.EventStarted, Tool: r.Name, Time: r.StartedAt, Attempt: r.Attempt, Worker: r.Worker}) {
			return
		}
	}
	o.yield(windlass.Event{CallID: w.callID, Kind: windlass.EventFinished, Tool: r.Name, Time: time.Now(), Attempt: r.Attempt, Worker: r.Worker, Result: &r}, nil)
}

// catchUp hands over the events stored before the result: the follower
// may not have delivered them yet (always so when the call finished before
// Watch began). It waits for them at most watchCatchUp, then takes what
// has arrived; false when the caller stopped.
func (w *watch) catchUp(ctx context.Context) bool {
	last := w.d.lastEventSeq(ctx, w.callID)
	waitCtx, stop := context.WithTimeout(ctx, watchCatchUp)
	defer stop()
	for w.seen < last && waitCtx.Err() == nil {
		select {
		case s := <-w.events:
			if !w.take(s) {
				return false
			}
		case <-waitCtx.Done():
		}
	}
	for {
		select {
		case s := <-w.events:
			if !w.take(s) {
				return false
			}
		default:
			return true
		}
	}
}

// watchCatchUp bounds how long Watch waits, once the result is in, for the
// events stored before it; queuedGrace how long it holds a worker's events
// back for a queued event still on its way.
const (
	watchCatchUp = 2 * time.Second
	queuedGrace  = time.Second
)

// A watch's consumer is deleted when Watch returns; watchInactive is the
// server's backstop for a process that dies first (the library's default
// is 5 minutes, long enough for a busy API to pile up thousands of
// consumers). The consumer counts as active while it has a pull request
// waiting, and Watch renews its request every watchPullExpiry, well within.
const (
	watchInactive   = 30 * time.Second
	watchPullExpiry = 10 * time.Second
)

// deleteWatchConsumer deletes the server's consumer of a watch, under its
// current name, even when ctx has ended (a client gone), within
// retry.ReadTimeout. A failure (NATS down) is left to watchInactive.
func (d *Dispatcher) deleteWatchConsumer(ctx context.Context, callID string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retry.ReadTimeout)
	defer cancel()
	if err := d.events.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		d.cfg.Logger.DebugContext(ctx, "dispatcher: watch: could not delete the consumer; the server drops it once inactive", "call_id", callID, "consumer", info.Name, "error", err)
	}
}

// queuedEvent is the queued event of a call's record.
func queuedEvent(callID string, rec callRecord) windlass.Event {
	return windlass.Event{CallID: callID, Kind: windlass.EventQueued, Tool: rec.tool, Time: rec.queuedAt, Deadline: rec.deadline, Origin: rec.origin, ArgsHash: rec.argsHash, Key: rec.key}
}

// eventOrder yields a call's events with its queued event first. Watch
// makes the queued event from the call's record when it starts; when the
// record cannot be read then, events that arrive before a queued event are
// held until one comes (a gated call's, from the events stream), or for
// queuedGrace.
type eventOrder struct {
	yield      func(windlass.Event, error) bool
	held       []windlass.Event
	queuedDone bool // queued was yielded, or waiting for it given up
	hold       <-chan time.Time
	started    int // the latest attempt whose started event was emitted
}

// emit yields e in order; false means the consumer stopped.
func (o *eventOrder) emit(e windlass.Event) bool {
	if e.Kind == windlass.EventStarted {
		o.started = max(o.started, e.Attempt)
	}
	switch {
	case e.Kind == windlass.EventQueued && o.queuedDone:
		return true // a call is queued once; a late one is out of order
	case e.Kind == windlass.EventQueued:
		o.queuedDone = true
		return o.yield(e, nil) && o.flush()
	case !o.queuedDone:
		o.held = append(o.held, e)
		if o.hold == nil {
			o.hold = time.After(queuedGrace)
		}
		return true
	}
	return o.yield(e, nil)
}

// flush yields the held events and stops holding.
func (o *eventOrder) flush() bool {
	o.queuedDone, o.hold = true, nil
	held := o.held
	o.held = nil
	for _, e := range held {
		if !o.yield(e, nil) {
			return false
		}
	}
	return true
}

// lastEventSeq is the stream sequence of the call's latest stored event
// (0 when it has none or the stream cannot say).
func (d *Dispatcher) lastEventSeq(ctx context.Context, callID string) uint64 {
	var last uint64
	ctx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	for _, kind := range []windlass.EventKind{windlass.EventQueued, windlass.EventStarted, windlass.EventProgress, windlass.EventRetrying} {
		if m, err := d.events.GetLastMsgForSubject(ctx, layout.EventSubject(callID, string(kind))); err == nil {
			last = max(last, m.Sequence)
		}
	}
	return last
}
