package worker

import (
	"log/slog"
	"sync"
)

// heldMessages are the call messages this worker holds — delivered to it
// and not yet settled or handed back — by their stream sequence.
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
	seqs map[uint64]struct{}
}

// hold marks the message seq held, and reports false when it already was.
func (h *heldMessages) hold(seq uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.seqs[seq]; ok {
		return false
	}
	if h.seqs == nil {
		h.seqs = map[uint64]struct{}{}
	}
	h.seqs[seq] = struct{}{}
	return true
}

// let marks the message seq no longer held.
func (h *heldMessages) let(seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.seqs, seq)
}

// heldHere leaves alone a delivery of a message this worker already holds
// (see heldMessages): it neither runs, nor answers, nor settles it. It
// runs right after decode, before any guard that could answer or bury the
// call on the strength of its delivery count.
func (w *Worker) heldHere(d *delivery) (outcome, bool) {
	if w.held.hold(d.meta.Sequence.Stream) {
		d.holds = true
		return outcome{}, false
	}
	return outcome{verb: verbLeave, level: slog.LevelWarn,
		note: "worker: call redelivered to the worker still holding it (its in-progress acknowledgements were late); not running it again"}, true
}

// letGo gives up the worker's hold of the delivery's message, once: before
// the message is settled, so that a redelivery the settling causes (a
// requeue, a retry) is not mistaken for one of a message still held.
func (d *delivery) letGo(w *Worker) {
	if d.holds {
		d.holds = false
		w.held.let(d.meta.Sequence.Stream)
	}
}
