package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/internal/layout"
)

// A redelivered call may still be held by a live worker of the fleet: one
// whose in-progress acknowledgements could not reach the server for an
// ack wait (a NATS restart or leader change longer than that, its link
// cut off) and that is back on its connection now, its tool still
// running. A worker that takes such a redelivery right after its own
// reconnect waits for the holder's answer (see reconnects); a long call
// has none to give by then, and running it would run the tool a second
// time beside the first, for something the first did nothing wrong in.
// So before it runs such a redelivery the worker asks the tool's other
// workers, on the tool's held-probe subject, whether one of them holds the
// message; a holder answers, and the delivery is left to it (verbLeave),
// as a redelivery to the holder itself is (see heldMessages). The server
// settles a message by its stream sequence, whichever delivery the ack
// comes from; the holder's heartbeat keeps the message, and should the
// holder be lost after all, the message is delivered again an ack wait
// later.

// heldProbe asks whether a worker holds the message Seq on Subject (a
// heldKey); Delivered is the delivery the asking worker took, which a
// holder counts (see heldMessages.most). From is the asker, which does
// not answer itself.
type heldProbe struct {
	Seq       uint64 `json:"seq"`
	Subject   string `json:"subject"`
	Delivered uint64 `json:"delivered"`
	From      string `json:"from"`
}

// heldReply is a holder's answer: its worker id, for the logs.
type heldReply struct {
	Worker string `json:"worker"`
}

// heldProbeWait is how long a worker waits for a holder's answer. Only a
// worker that holds the message answers; the others stay silent, so a
// call nobody holds waits this long before it runs again. The holder is
// back on its connection by then (the probe comes at the end of the settle
// window): its answer is one core NATS round trip.
const heldProbeWait = time.Second

// answerHeldProbes answers, for each of the worker's tools, the probes of
// the messages it holds, until the returned stop is called.
func (w *Worker) answerHeldProbes(tools []*registered) (stop func(), err error) {
	nc := w.cfg.JetStream.Conn()
	subs := make([]*nats.Subscription, 0, len(tools))
	stop = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, t := range tools {
		s, err := nc.Subscribe(layout.HeldProbeSubject(t.spec.Name), w.answerHeldProbe)
		if err != nil {
			stop()
			return nil, fmt.Errorf("worker: answer held probes of %q: %w", t.spec.Name, err)
		}
		subs = append(subs, s)
	}
	// A NATS user without the permission (an accounts.conf older than the
	// probes) is refused asynchronously, and the refusal comes before the
	// flush's answer. The worker runs all the same, as a worker of an
	// older release would, but says why redeliveries after an outage may
	// run beside their holders.
	if nc.FlushTimeout(heldProbeWait) == nil {
		if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), layout.HeldProbeSubject("")) {
			w.cfg.Logger.Warn("worker: the NATS user may not subscribe to the held probes; a call redelivered after an outage while a live worker still holds it may run beside it (grant the worker role windlass.held.* as deploy/nats/accounts.conf does)",
				"error", last)
		}
	}
	return stop, nil
}

// answerHeldProbe answers a probe when this worker holds its message.
func (w *Worker) answerHeldProbe(m *nats.Msg) {
	var p heldProbe
	if m.Reply == "" || json.Unmarshal(m.Data, &p) != nil || p.From == w.self {
		return
	}
	if !w.held.held(heldKey{seq: p.Seq, subject: p.Subject}, p.Delivered) {
		return
	}
	b, err := json.Marshal(heldReply{Worker: w.cfg.ID})
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		w.cfg.Logger.Warn("worker: could not answer that it holds a redelivered call", "subject", p.Subject, "error", err)
	}
}

// heldElsewhere asks the tool's other workers whether one of them holds the
// delivery's message, and returns its id when one answers within
// heldProbeWait, "" when none does.
func (w *Worker) heldElsewhere(d *delivery) (holder string) {
	b, err := json.Marshal(heldProbe{Seq: d.meta.Sequence.Stream, Subject: d.msg.Subject(), Delivered: d.meta.NumDelivered, From: w.self})
	if err != nil {
		return ""
	}
	// Not under the call's context, which the shutdown grace's end
	// cancels: a holder that answers is left the call all the same (see
	// answeredAfterReconnect).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), heldProbeWait)
	defer cancel()
	m, err := w.cfg.JetStream.Conn().RequestWithContext(ctx, layout.HeldProbeSubject(d.t.spec.Name), b)
	if err != nil {
		return ""
	}
	// Only a holder answers (see answerHeldProbe): a reply is what says
	// the message is held, whatever its body; the id in it is for the
	// logs, and an empty one would read as no holder.
	var r heldReply
	_ = json.Unmarshal(m.Data, &r)
	return cmp.Or(r.Worker, unnamedHolder)
}

// unnamedHolder names in the logs a holder whose answer did not name it.
const unnamedHolder = "(a worker that did not give its id)"

// leftToHolder is the outcome of a redelivery that another live worker
// holds.
func leftToHolder(holder string) outcome {
	return outcome{verb: verbLeave, count: countLeftAlone, level: slog.LevelWarn, attrs: []any{"holder", holder},
		note: "worker: call redelivered while another worker still holds it (its in-progress acknowledgements were cut off); left to that worker, not run again"}
}
