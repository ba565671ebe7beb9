package worker

import (
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// heldMessages are the call messages this worker holds — delivered to it
// and not yet settled or handed back — by their stream sequence and
// subject (heldKey).
//
// JetStream redelivers a message whose in-progress acks stop coming within
// the ack wait, and it may redeliver it to the very worker still holding
// it: a worker whose acknowledgements were late (they queued on its
// connection behind a large upload, or a long pause of the process) is
// alive and pulling. Running that delivery would run the tool a second
// time beside the first, for something the first did right. The server
// settles a message by its stream sequence, whichever delivery the ack
// comes from, so the worker leaves the new delivery alone: the one it
// holds keeps the message alive with its heartbeat and settles it.
type heldMessages struct {
	mu   sync.Mutex
	most map[heldKey]uint64 // the highest delivery count seen of each held message
}

// heldKey names a call message: its stream sequence, and its subject (the
// call's own), so that a calls stream recreated under the worker, whose
// sequences start again, never makes another call's message look held.
type heldKey struct {
	seq     uint64
	subject string
}

// keyOf is the key of a delivered message.
func keyOf(msg jetstream.Msg, meta *jetstream.MsgMetadata) heldKey {
	return heldKey{seq: meta.Sequence.Stream, subject: msg.Subject()}
}

// hold marks the message k held by its delivered-th delivery, and reports
// false when it already was (that delivery is then counted: see most).
func (h *heldMessages) hold(k heldKey, delivered uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.most[k]; ok {
		h.most[k] = max(n, delivered)
		return false
	}
	if h.most == nil {
		h.most = map[heldKey]uint64{}
	}
	h.most[k] = delivered
	return true
}

// held reports whether the message k is held, counting its delivered-th
// delivery when it is.
func (h *heldMessages) held(k heldKey, delivered uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.most[k]
	if ok {
		h.most[k] = max(n, delivered)
	}
	return ok
}

// deliveries is the highest delivery count seen of the held message k: a
// delivery left alone counts as an attempt (an attempt is a delivery), so
// a retry decided by the delivery that holds it must not ask for more
// deliveries than remain.
func (h *heldMessages) deliveries(k heldKey) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int(h.most[k])
}

// let marks the message k no longer held.
func (h *heldMessages) let(k heldKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.most, k)
}

// leaveAlone is the outcome of a delivery of a message the worker holds.
func leaveAlone() outcome {
	return outcome{verb: verbLeave, count: countLeftAlone, level: slog.LevelWarn,
		note: "worker: call redelivered to the worker still holding it (its in-progress acknowledgements were late); not running it again"}
}

// heldHere leaves alone a delivery of a message this worker already holds
// (see heldMessages): it neither runs, nor answers, nor settles it. It
// runs right after decode, before any guard that could answer or bury the
// call on the strength of its delivery count.
func (w *Worker) heldHere(d *delivery) (outcome, bool) {
	if w.held.hold(keyOf(d.msg, d.meta), d.meta.NumDelivered) {
		d.holds = true
		return outcome{}, false
	}
	return leaveAlone(), true
}

// attempts is how many deliveries the call's message has had, the one
// that holds it and those left alone since included.
func (d *delivery) attempts(w *Worker) int {
	if !d.holds {
		return d.call.Attempt
	}
	return max(d.call.Attempt, w.held.deliveries(keyOf(d.msg, d.meta)))
}

// letGo gives up the worker's hold of the delivery's message, once: before
// the message is settled, so that a redelivery the settling causes (a
// requeue, a retry) is not mistaken for one of a message still held.
func (d *delivery) letGo(w *Worker) {
	if d.holds {
		d.holds = false
		w.held.let(keyOf(d.msg, d.meta))
	}
}
