package worker

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
)

// resultPipe stores the worker's answers without waiting for each one:
// send publishes an answer asynchronously and hands it to the pipe's one
// drainer, which takes the stream's acknowledgements in publish order and
// concludes each call (counts it, acks or terminates its message) once its
// answer is stored — never before. An answer whose publish fails or is not
// acknowledged in time is stored again the way it always was (see
// again), on its own goroutine, and concluded from there.
//
// At most maxOutstanding answers are on their way at once: send waits for
// room, holding the call's slot, so a slow results stream slows the worker
// down rather than piling answers up in memory.
type resultPipe struct {
	w     *Worker
	js    jetstream.JetStream // asynchronous publishes, with their own bounds
	room  chan struct{}       // one token per answer on its way
	queue chan *answering     // to the drainer, in publish order
	done  chan struct{}       // closed when the drainer has returned
}

// maxOutstanding bounds the answers a worker has published and not yet
// had acknowledged.
const maxOutstanding = 1024

// answering is one answer on its way to the results stream.
type answering struct {
	d    *delivery
	o    outcome             // o.answer is what the outcome answers
	sent windlass.ToolResult // what m holds: o.answer, or its result_too_large
	m    *nats.Msg
	fut  jetstream.PubAckFuture
}

// newResultPipe starts a worker's result pipe; close stops it once every
// answer sent is concluded.
func newResultPipe(w *Worker) (*resultPipe, error) {
	base := w.cfg.JetStream.Options()
	opts := []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncMaxPending(maxOutstanding + 1),
		// A lost acknowledgement (a server restart, a leader change) is
		// given up on after this and stored again by again.
		jetstream.WithPublishAsyncTimeout(retry.WriteTimeout),
	}
	var js jetstream.JetStream
	var err error
	switch conn := w.cfg.JetStream.Conn(); {
	case base.Domain != "":
		js, err = jetstream.NewWithDomain(conn, base.Domain, opts...)
	case base.APIPrefix != "":
		js, err = jetstream.NewWithAPIPrefix(conn, base.APIPrefix, opts...)
	default:
		js, err = jetstream.New(conn, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: result publisher: %w", err)
	}
	p := &resultPipe{w: w, js: js, room: make(chan struct{}, maxOutstanding), queue: make(chan *answering, maxOutstanding), done: make(chan struct{})}
	go p.drain()
	return p, nil
}

// close stops the drainer; every call must be concluded by then.
func (p *resultPipe) close() {
	close(p.queue)
	<-p.done
}

// send publishes o's answer and lets the drainer conclude the call once it
// is stored. The call's slot is freed once the answer is on its way: its
// tool is done.
func (p *resultPipe) send(d *delivery, o outcome) {
	a := &answering{d: d, o: o}
	var err error
	if a.sent, a.m, err = p.w.resultMessage(d, o.answer); err != nil {
		d.logger().ErrorContext(d.ctx, "worker: could not prepare the result's message; leaving the call for redelivery", "error", err)
		d.end(p.w)
		return
	}
	p.room <- struct{}{}
	d.freeSlot()
	a.fut, err = p.js.PublishMsgAsync(a.m)
	if a.shrink(p.w, err) {
		a.fut, err = p.js.PublishMsgAsync(a.m)
	}
	if err != nil {
		go p.again(a)
		return
	}
	p.queue <- a
}

// drain concludes the answers in publish order as their acknowledgements
// come (the stream acknowledges them in that order).
func (p *resultPipe) drain() {
	defer close(p.done)
	for a := range p.queue {
		select {
		case ack := <-a.fut.Ok():
			p.stored(a, ack, false)
		case <-a.fut.Err():
			go p.again(a)
		}
	}
}

// again stores an answer whose asynchronous publish failed the way a
// worker always has: synchronously, retrying (see publishDurably), and
// concludes the call; if it cannot be stored, the call is left for
// redelivery.
func (p *resultPipe) again(a *answering) {
	ack, err := p.w.publishDurably(a.d.ctx, a.m)
	if a.shrink(p.w, err) {
		ack, err = p.w.publishDurably(a.d.ctx, a.m)
	}
	if err != nil {
		a.d.logger().ErrorContext(a.d.ctx, "worker: could not publish the result; leaving the call for redelivery", "error", err)
		<-p.room
		a.d.end(p.w)
		return
	}
	p.stored(a, ack, true)
}

// stored concludes a call whose answer the results stream acknowledged.
// An answer published again (again) may be the duplicate of itself: an
// earlier publish of it stored, its acknowledgement lost.
func (p *resultPipe) stored(a *answering, ack *jetstream.PubAck, republished bool) {
	<-p.room
	p.w.freeSlotOf(a.d)
	duplicate := ack.Duplicate && !(republished && p.w.mayBeStored(a.d, a.sent))
	p.w.countAnswer(a.d, a.o.answer, a.sent, duplicate)
	p.w.conclude(a.d, a.o)
}

// shrink replaces the answer by its result_too_large when its publish
// failed for the max payload (the server's limit is below what the client
// was told: a reconfigured server), and reports whether it did, so that
// the smaller answer is published instead.
func (a *answering) shrink(w *Worker, err error) bool {
	if !errors.Is(err, nats.ErrMaxPayload) || a.sent.Code() == windlass.CodeResultTooLarge {
		return false
	}
	a.sent, a.m.Data = w.tooLarge(a.sent, len(a.m.Data), w.cfg.JetStream.Conn().MaxPayload())
	if _, signed := a.m.Header[layout.HeaderReceipt]; signed {
		w.signReceipt(a.d, a.m, a.o.answer.StartedAt) // over the new body
	}
	return true
}
