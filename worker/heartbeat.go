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
type heartbeat struct {
	w       *Worker
	msg     jetstream.Msg
	call    windlass.ToolCall
	latest  atomic.Pointer[windlass.Progress]
	running atomic.Bool // the tool runs: a cancellation found reaches it

	stopOnce sync.Once
	done     chan struct{}
	finished chan struct{}
}

func (w *Worker) startHeartbeat(msg jetstream.Msg, call windlass.ToolCall) *heartbeat {
	h := &heartbeat{w: w, msg: msg, call: call, done: make(chan struct{}), finished: make(chan struct{})}
	go h.run()
	return h
}

// report is the tool's progress sink: it only keeps the latest report.
func (h *heartbeat) report(p windlass.Progress) { h.latest.Store(&p) }

// watch makes the heartbeat cancel the running tool when it finds the call
// canceled.
func (h *heartbeat) watch() { h.running.Store(true) }

func (h *heartbeat) run() {
	defer close(h.finished)
	t := time.NewTicker(h.w.cfg.Heartbeat)
	defer t.Stop()
	keepAlive := h.w.cfg.AckWait / 3
	lastAlive := time.Now()
	var sent *windlass.Progress
	for {
		select {
		case <-h.done:
			return
		case now := <-t.C:
			p := h.latest.Load()
			changed := p != sent
			if changed {
				sent = p
				h.w.publishEvent(h.call, windlass.Event{Kind: windlass.EventProgress, Attempt: h.call.Attempt, Progress: p})
			}
			if changed || now.Sub(lastAlive) >= keepAlive-h.w.cfg.Heartbeat/2 {
				_ = h.msg.InProgress()
				lastAlive = now
				h.checkCanceled()
			}
		}
	}
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

// stop ends the heartbeat and waits for it; it is safe to call twice.
func (h *heartbeat) stop() {
	h.stopOnce.Do(func() { close(h.done); <-h.finished })
}
