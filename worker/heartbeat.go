package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
)

// heartbeat is a delivered call's one periodic signal. Every tick it hands
// the tool's latest progress, if it changed, to the caller as a progress
// event; and at least every AckWait/3 it tells JetStream the call is in
// progress (so it is not redelivered while its worker lives) and looks for
// a cancellation this worker may have missed, which it brings to the tool.
//
// The worker's one ticker (see beats) drives every heartbeat: a call that
// only waits costs no goroutine of its own, so a worker can hold many
// thousands of sleeping calls. The tick publishes (progress, in-progress
// ack) inline, which never waits for the server; the cancellation look-up,
// which does, goes to a small pool.
type heartbeat struct {
	w        *Worker
	msg      jetstream.Msg
	call     windlass.ToolCall
	latest   atomic.Pointer[windlass.Progress]
	running  atomic.Bool // the tool runs, or waits for its turn under a rate: a cancellation found reaches it
	checking atomic.Bool // a cancellation look-up is queued or running

	startedAt time.Time   // when the tool began; set by begin, before the timer
	announce  *time.Timer // sends the started event startedDelay after begin

	eventsMu  sync.Mutex // orders the attempt's events: started first
	announced bool       // the attempt's started event went out
	over      bool       // the tool returned: no started or progress event is due

	mu        sync.Mutex // taken by a tick and by stop
	stopped   bool
	sent      *windlass.Progress
	lastAlive time.Time
	stopOnce  sync.Once
}

func (w *Worker) startHeartbeat(msg jetstream.Msg, call windlass.ToolCall) *heartbeat {
	h := &heartbeat{w: w, msg: msg, call: call, lastAlive: time.Now()}
	w.beats.add(h)
	return h
}

// report is the tool's progress sink: it only keeps the latest report.
func (h *heartbeat) report(p windlass.Progress) { h.latest.Store(&p) }

// startedDelay is how long an attempt runs before its started event goes
// out. An attempt answered sooner sends none: its result carries the start
// (ToolResult.StartedAt, with the worker and the attempt), from which Watch
// and Status tell it; skipping the event spares the events stream one of
// the messages it would store for every fast call. Five milliseconds is
// too short for a person watching to see the difference.
const startedDelay = 5 * time.Millisecond

// begin marks the tool as started: from now a cancellation the heartbeat
// finds cancels it, and the started event goes out once the attempt has run
// for startedDelay.
func (h *heartbeat) begin() {
	h.startedAt = time.Now()
	h.running.Store(true)
	h.announce = time.AfterFunc(startedDelay, h.announceStarted)
}

// announceStarted publishes the attempt's started event, once, unless the
// tool returned; the timer's call.
func (h *heartbeat) announceStarted() { h.attemptEvent(nil, true) }

// attemptEvent publishes the attempt's started event, if it has not gone
// out, and then e (when not nil), so that no event of the attempt goes out
// without its start before it; concurrent callers wait for the one
// publishing. With whileRunning (progress, the timer) nothing goes out
// once the tool has returned; a retrying event, published after the tool
// returned, passes false.
func (h *heartbeat) attemptEvent(e *windlass.Event, whileRunning bool) {
	h.eventsMu.Lock()
	defer h.eventsMu.Unlock()
	if whileRunning && h.over {
		return
	}
	if !h.announced {
		h.announced = true
		h.w.publishEvent(h.call, windlass.Event{Kind: windlass.EventStarted, Attempt: h.call.Attempt, Time: h.startedAt})
	}
	if e != nil {
		h.w.publishEvent(h.call, *e)
	}
}

// ended tells the heartbeat the tool returned: a started event not yet sent
// is no longer due (the result records the start), nor is progress. A
// timer already firing waits for it, so a started event it sends goes out
// before the result.
func (h *heartbeat) ended() {
	if h.announce != nil {
		h.announce.Stop()
	}
	h.eventsMu.Lock()
	h.over = true
	h.eventsMu.Unlock()
}

// tick is one period of the heartbeat, on the beats goroutine. A
// cancellation look-up it wants is sent to checks, unless the pool is
// saturated: then the next keep-alive asks again (the worker's follower of
// the cancels stream is the first way a cancellation arrives; this is the
// safety net).
func (h *heartbeat) tick(now time.Time, checks chan<- *heartbeat) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	p := h.latest.Load()
	changed := p != h.sent
	if !changed && now.Sub(h.lastAlive) < h.w.cfg.AckWait/3-h.w.cfg.Heartbeat/2 {
		return
	}
	if changed {
		h.sent = p
		h.attemptEvent(&windlass.Event{Kind: windlass.EventProgress, Attempt: h.call.Attempt, Progress: p}, true)
	}
	_ = h.msg.InProgress() // a publish: it does not wait for the server
	h.lastAlive = now
	if h.running.Load() && h.checking.CompareAndSwap(false, true) {
		select {
		case checks <- h:
		default:
			h.checking.Store(false)
		}
	}
}

// checkCanceled asks the cancels stream whether the running call was
// canceled, in case the worker's follower missed it (cut off from NATS for
// a while); a cancellation found cancels the call's context.
func (h *heartbeat) checkCanceled() {
	defer h.checking.Store(false)
	ctx, stop := context.WithTimeout(context.Background(), h.w.cfg.Heartbeat)
	defer stop()
	h.w.checkCancellation(ctx, h.call.ID)
}

// stop ends the heartbeat, waiting for a tick that is publishing; it is
// safe to call twice. No in-progress ack or progress event goes out for the
// call after it.
func (h *heartbeat) stop() {
	h.stopOnce.Do(func() {
		h.w.beats.remove(h)
		h.mu.Lock()
		h.stopped = true
		h.mu.Unlock()
	})
}

// beats ticks the heartbeats of a worker's calls.
type beats struct {
	mu  sync.Mutex
	set map[*heartbeat]struct{}
}

func (b *beats) add(h *heartbeat) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.set == nil {
		b.set = map[*heartbeat]struct{}{}
	}
	b.set[h] = struct{}{}
}

func (b *beats) remove(h *heartbeat) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.set, h)
}

// Bounds of the cancellation look-ups the heartbeats make at once, and of
// those waiting for a turn.
const (
	checkWorkers = 16
	checkQueue   = 4096
)

// run ticks every heartbeat each period until stop is closed, then waits
// for the cancellation look-ups under way.
func (b *beats) run(period time.Duration, stop <-chan struct{}) {
	checks := make(chan *heartbeat, checkQueue)
	var checkers sync.WaitGroup
	for range checkWorkers {
		checkers.Go(func() {
			for h := range checks {
				h.checkCanceled()
			}
		})
	}
	defer func() { close(checks); checkers.Wait() }()
	t := time.NewTicker(period)
	defer t.Stop()
	var due []*heartbeat
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			b.mu.Lock()
			due = due[:0]
			for h := range b.set {
				due = append(due, h)
			}
			b.mu.Unlock()
			for _, h := range due {
				h.tick(now, checks)
			}
			clear(due)
		}
	}
}
