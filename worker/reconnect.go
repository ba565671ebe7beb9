package worker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// reconnects remembers when the worker's NATS connection last came back.
//
// A call is redelivered when its worker's in-progress acks stop reaching
// the server for an ack wait. A worker that is alive and merely cut off
// (a NATS restart, a leader change, a network blip) sends none while the
// link is down, so the server may hand its call to another worker right
// after the outage, while the first still holds the call and its answer:
// its answer reaches the results stream only once its own connection is
// back, moments later. A worker that takes a redelivered call without an
// answer soon after its own reconnect therefore waits that long for the
// answer before it runs the call again (see answeredAfterReconnect); a
// redelivery at any other time means its earlier worker was lost, and is
// run at once.
type reconnects struct {
	at     atomic.Int64  // unix nanoseconds of the last reconnect; 0: none
	settle time.Duration // how long after a reconnect a redelivery may be a live worker's call
}

// reconnectMargin is added to the connection's reconnect delay in the
// settle window: the time for the other worker, back on its connection,
// to flush the answer it buffered and for the stream to store it.
const reconnectMargin = 500 * time.Millisecond

// follow records the connection's reconnects until the returned stop is
// called. The other workers of the fleet are assumed to reconnect as this
// one does: within its reconnect delay and jitter of each other.
func (r *reconnects) follow(nc *nats.Conn) (stop func()) {
	jitter := nc.Opts.ReconnectJitter
	if nc.Opts.Secure || nc.Opts.TLSConfig != nil {
		jitter = nc.Opts.ReconnectJitterTLS
	}
	r.settle = nc.Opts.ReconnectWait + jitter + reconnectMargin
	ch := nc.StatusChanged(nats.CONNECTED)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ch {
			r.at.Store(time.Now().UnixNano())
		}
	}()
	return func() {
		nc.RemoveStatusListener(ch) // closes ch
		<-done
	}
}

// settling returns when the settle window of the latest reconnect ends,
// and false when there is none open now.
func (r *reconnects) settling(now time.Time) (until time.Time, ok bool) {
	at := r.at.Load()
	if at == 0 {
		return time.Time{}, false
	}
	until = r.window(at)
	return until, now.Before(until)
}

// window is when the settle window of the reconnect at (unix
// nanoseconds) ends.
func (r *reconnects) window(at int64) time.Time {
	return time.Unix(0, at).Add(r.settle)
}

// settlePoll is how often the answer of a redelivered call is looked for
// during a settle window.
const settlePoll = 100 * time.Millisecond

// answeredAfterReconnect reports whether a redelivered call found without
// an answer gets one before the settle window of the worker's latest
// reconnect ends, the heartbeat keeping its message meanwhile; outside a
// window it reports false at once. The call's deadline does not cut the
// wait short: past it the call cannot run again anyway, and an answer of
// timeout stored then would beat the holder's real one. interrupted
// reports that the call's context ended first (the worker's shutdown
// grace over): whether it was answered is not known. A window that ends
// without an answer ends with a probe of the tool's workers: holder names
// the one that answers that it still holds the message (see
// heldElsewhere), back on its connection with a call that takes longer.
// Without one, the answer is looked for once more, the look retried until
// deadline (the call's, or its release's expiry; zero: until shutdown).
// When the worker reconnected again meanwhile, all of it is done again in
// the new reconnect's window. stop is the call's outcome when the wait
// ends it: left to its holder, or handed back (interrupted).
func (w *Worker) answeredAfterReconnect(d *delivery, deadline time.Time) (answered bool, stop outcome, stopped bool) {
	until, ok := w.reconnects.settling(time.Now())
	if !ok {
		return false, outcome{}, false
	}
	nc := w.cfg.JetStream.Conn()
	for {
		// Counted by the connection before it is used again (the status
		// event that moves reconnects.at comes after): a reconnect is
		// seen by the time anything this round asks has an answer.
		reconnected, at := nc.Stats().Reconnects, w.reconnects.at.Load()
		answered, holder, interrupted := w.settle(d, deadline, until)
		switch {
		case interrupted:
			return false, handedBack(settleInterrupted, d.ctx.Err()), true
		case holder != "":
			return false, leftToHolder(holder), true
		case answered:
			return true, outcome{}, false
		}
		// A probe made while the worker's own link was down again (a link
		// that flaps just after an outage) reached no one, and its silence
		// says nothing of a holder, which may be back on its connection
		// with its tool still running: a reconnect since the window
		// opened opens one of its own, in which the answer is waited for
		// and the probe made again.
		if nc.Stats().Reconnects == reconnected {
			return false, outcome{}, false
		}
		latest := w.reconnects.at.Load()
		if latest == at {
			latest = time.Now().UnixNano() // its status event not seen yet
		}
		until = w.reconnects.window(latest)
	}
}

// settle waits until the settle window's end for the call's answer, then
// probes for a holder and looks for the answer once more (see
// answeredAfterReconnect).
func (w *Worker) settle(d *delivery, deadline, until time.Time) (answered bool, holder string, interrupted bool) {
	ctx, cancel := context.WithDeadline(d.ctx, until)
	defer cancel()
	d.logger().InfoContext(ctx, "worker: a redelivered call came soon after a reconnect; waiting for the answer of a worker that may still hold it",
		"until", until)
	t := time.NewTicker(settlePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// A holder found is left the call even if the worker is
			// stopping (its shutdown grace over, before or during the
			// probe): handed back, the call would be delivered again at
			// once, beside its holder. The probe is bounded by
			// heldProbeWait, not by the call's context.
			if holder := w.heldElsewhere(d); holder != "" {
				return false, holder, false
			}
			if d.ctx.Err() != nil {
				return false, "", true
			}
			// A holder that finished while it was asked no longer holds
			// the message, and answers nothing: it let go of it only once
			// its answer was stored. So this look must be answered, as the
			// intake's is (see alreadyAnswered): a read that fails is made
			// again, the heartbeat keeping the message, until deadline (past
			// it the call is answered timeout, which does not beat a stored
			// answer) or the worker's shutdown (the call is handed back).
			err := w.untilAnswered(d, deadline, "cannot tell whether the redelivered call was answered", func(ctx context.Context) error {
				var err error
				_, answered, err = w.storedResult(ctx, d.call.ID)
				return err
			})
			if err != nil && d.ctx.Err() != nil {
				return false, "", true
			}
			return err == nil && answered, "", false
		case <-t.C:
		}
		if _, answered, err := w.storedResult(ctx, d.call.ID); err == nil && answered {
			return true, "", false
		}
	}
}

// settleInterrupted is the note of a call handed back because the worker
// stopped while it waited for the answer of the call's holder.
const settleInterrupted = "stopped while waiting for the answer of a worker that may still hold the call"
