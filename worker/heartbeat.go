package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
)

// heartbeat is a delivered call's one periodic signal. Every tick it hands
// the tool's latest progress, if it changed, to the caller as a progress
// event; and at least every AckWait/3 it tells JetStream the call is in
// progress (so it is not redelivered while its worker lives) and looks for
// a cancellation this worker may have missed, which it brings to the tool.
type heartbeat struct {
	w      *Worker
	msg    jetstream.Msg
	call   windlass.ToolCall
	latest atomic.Pointer[windlass.Progress]
	cancel atomic.Pointer[context.CancelCauseFunc]

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
func (h *heartbeat) watch(cancel context.CancelCauseFunc) { h.cancel.Store(&cancel) }

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

// checkCanceled asks the cancels stream whether the call was canceled, in
// case the worker's follower missed it (cut off from NATS for a while).
func (h *heartbeat) checkCanceled() {
	cancel := h.cancel.Load()
	if cancel == nil || h.w.cancelsStream == nil {
		return
	}
	ctx, stop := context.WithTimeout(context.Background(), h.w.cfg.Heartbeat)
	defer stop()
	if rec, ok := h.w.readCancellation(ctx, h.call.ID); ok {
		h.w.cancels.add(layout.CallToken(h.call.ID), rec)
		(*cancel)(windlass.CancelCause(rec.Reason))
	}
}

// stop ends the heartbeat and waits for it; it is safe to call twice.
func (h *heartbeat) stop() {
	h.stopOnce.Do(func() { close(h.done); <-h.finished })
}
