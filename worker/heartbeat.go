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
// thousands of sleeping calls. A beat with something to do acts on a
// goroutine of its own, one at a time per call.
type heartbeat struct {
	w       *Worker
	msg     jetstream.Msg
	call    windlass.ToolCall
	latest  atomic.Pointer[windlass.Progress]
	running atomic.Bool // the tool runs: a cancellation found reaches it

	busy      atomic.Bool // a beat is acting; the next tick skips the call
	sent      *windlass.Progress
	lastAlive time.Time // sent and lastAlive: owned by the beat holding busy

	mu       sync.Mutex // held by an acting beat; stop takes it
	stopped  bool
	stopOnce sync.Once
}

func (w *Worker) startHeartbeat(msg jetstream.Msg, call windlass.ToolCall) *heartbeat {
	h := &heartbeat{w: w, msg: msg, call: call, lastAlive: time.Now()}
	w.beats.add(h)
	return h
}

// report is the tool's progress sink: it only keeps the latest report.
func (h *heartbeat) report(p windlass.Progress) { h.latest.Store(&p) }

// watch makes the heartbeat cancel the running tool when it finds the call
// canceled.
func (h *heartbeat) watch() { h.running.Store(true) }

// tick is one period of the heartbeat, on the beats goroutine: it decides
// whether the call has something to send and, if so, acts on a goroutine
// owned by the beats.
func (h *heartbeat) tick(now time.Time, actions *sync.WaitGroup) {
	if !h.busy.CompareAndSwap(false, true) {
		return // the last beat still acts (a slow server); skip this one
	}
	p := h.latest.Load()
	changed := p != h.sent
	keepAlive := h.w.cfg.AckWait / 3
	if !changed && now.Sub(h.lastAlive) < keepAlive-h.w.cfg.Heartbeat/2 {
		h.busy.Store(false)
		return
	}
	actions.Go(func() {
		defer h.busy.Store(false)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped {
			return
		}
		if changed {
			h.sent = p
			h.w.publishEvent(h.call, windlass.Event{Kind: windlass.EventProgress, Attempt: h.call.Attempt, Progress: p})
		}
		_ = h.msg.InProgress()
		h.lastAlive = now
		h.checkCanceled()
	})
}

// checkCanceled asks the cancels stream whether the running call was
// canceled, in case the worker's follower missed it (cut off from NATS for
// a while); a cancellation found cancels the call's context.
func (h *heartbeat) checkCanceled() {
	if !h.running.Load() {
		return // not running yet
	}
	ctx, stop := context.WithTimeout(context.Background(), h.w.cfg.Heartbeat)
	defer stop()
	h.w.checkCancellation(ctx, h.call.ID)
}

// stop ends the heartbeat, waiting for a beat that is acting; it is safe to
// call twice. No beat acts for the call after it.
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

// run ticks every heartbeat each period until stop is closed, then waits
// for the beats still acting.
func (b *beats) run(period time.Duration, stop <-chan struct{}) {
	var actions sync.WaitGroup
	defer actions.Wait()
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
				h.tick(now, &actions)
			}
			clear(due)
		}
	}
}
