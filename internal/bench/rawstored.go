package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/windlass-dev/windlass/internal/retry"
)

// The third baseline's streams and subjects, apart from the first's so
// that the two never share a work queue.
func storedCallStream(run string) string     { return "BENCH_RAW_" + run + "_CALLS" }
func storedAnswerStream(run string) string   { return "BENCH_RAW_" + run + "_ANSWERS" }
func storedCallSubjects(run string) string   { return "bench.stored." + run + ".call.*" }
func storedAnswerSubjects(run string) string { return "bench.stored." + run + ".answer.*" }

// rawStored is the raw JetStream round trip made to store what the fleet
// stores for a call, the way the fleet stores it, with nothing else of the
// fleet: the caller stores the call on a subject of its own (deduplicated
// by id), waiting for the stream's ack as the dispatcher does; the
// responder stores the answer on a subject of its own (deduplicated by id)
// in a second stream without waiting, and acks the call when that store's
// ack arrives, as the worker's result pipe does; the caller gets the answer
// on one shared wildcard subscription to the answers' subjects. Two stored
// messages a call, as the fleet's call and result: the fleet's ratio to it
// is the cost of the fleet's own code.
type rawStored struct {
	run      string
	js       jetstream.JetStream
	pending  sync.Map // id -> chan struct{}
	seq      atomic.Int64
	loop     *pullLoop
	answers  *nats.Subscription
	handlers sync.WaitGroup
}

// startRawStored sets up the third baseline: callerConn calls, serverConn
// answers.
func startRawStored(ctx context.Context, run string, callerConn, serverConn *nats.Conn) (_ *rawStored, err error) {
	js, sjs, err := jetStreams(callerConn, serverConn)
	if err != nil {
		return nil, err
	}
	r := &rawStored{run: run, js: js}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: storedCallStream(run), Subjects: []string{storedCallSubjects(run)}, Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute},
		{Name: storedAnswerStream(run), Subjects: []string{storedAnswerSubjects(run)}, Retention: jetstream.LimitsPolicy, Duplicates: time.Minute},
	} {
		cfg.Storage = jetstream.FileStorage
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("bench: stored baseline: stream %s: %w", cfg.Name, err)
		}
	}
	cons, err := sjs.CreateOrUpdateConsumer(ctx, storedCallStream(run), jetstream.ConsumerConfig{Durable: "stored", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
	if err != nil {
		return nil, fmt.Errorf("bench: stored baseline: consumer: %w", err)
	}
	if r.answers, err = callerConn.Subscribe(storedAnswerSubjects(run), answered(&r.pending)); err != nil {
		return nil, fmt.Errorf("bench: stored baseline: answers: %w", err)
	}
	_ = r.answers.SetPendingLimits(-1, -1)
	answerPrefix := "bench.stored." + run + ".answer."
	// Each call on a goroutine of its own, as the fleet's worker runs its
	// tools; the answer's store is waited for on another.
	r.loop, err = startPullLoop(cons, func(m jetstream.Msg) {
		r.handlers.Go(func() {
			if d := sleepOf(nats.Header(m.Headers())); d > 0 {
				time.Sleep(d)
			}
			id := m.Headers().Get(nats.MsgIdHdr)
			data := []byte(id)
			if n, _ := strconv.Atoi(m.Headers().Get(answerSizeHeader)); n > 0 {
				data = append(append(data, ' '), filled(n)...)
			}
			fut, err := sjs.PublishMsgAsync(&nats.Msg{Subject: answerPrefix + id, Data: data, Header: nats.Header{nats.MsgIdHdr: []string{"answer:" + id}}})
			if err != nil {
				return // not acked: redelivered, as a fleet call would be
			}
			r.handlers.Go(func() {
				select {
				case <-fut.Ok():
					_ = m.Ack()
				case <-fut.Err(): // not acked: redelivered
				}
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("bench: stored baseline: pull: %w", err)
	}
	return r, nil
}

// close stops the responder and deletes the streams.
func (r *rawStored) close() {
	r.loop.stop()
	if r.answers != nil {
		_ = r.answers.Unsubscribe()
	}
	r.handlers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), retry.WriteTimeout)
	defer cancel()
	for _, s := range []string{storedCallStream(r.run), storedAnswerStream(r.run)} {
		_ = r.js.DeleteStream(ctx, s)
	}
}

// call returns the stored round trip with payload bytes of data, answers
// of the call id and answer bytes more, and the given responder work.
func (r *rawStored) call(payload, answer int, work time.Duration) CallFunc {
	return jetStreamRoundTrip(r.js, r.run, &r.seq, &r.pending, func(id string) string { return "bench.stored." + r.run + ".call." + id }, payload, answer, work)
}
