package bench

import (
	"context"
	"fmt"
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
func storedRecordStream(run string) string   { return "BENCH_RAW_" + run + "_RECORDS" }
func storedAnswerStream(run string) string   { return "BENCH_RAW_" + run + "_ANSWERS" }
func storedCallSubject(run string) string    { return "bench.stored." + run + ".call" }
func storedAnswerSubjects(run string) string { return "bench.stored." + run + ".answer.*" }
func storedRecordSubjects(run string) string { return "bench.stored." + run + ".record.*" }

// rawStored is the raw JetStream round trip made to store what the fleet
// stores for a call, with nothing else of the fleet: the caller stores the
// call (deduplicated by id), then a record of it on a subject of its own in
// a second stream, each waiting for the stream's ack as the dispatcher
// does; the responder stores the answer on a subject of its own (deduplicated
// by id) in a third stream, waits for that ack, then acks the call; the
// caller gets the answer on one shared wildcard subscription to the
// answers' subjects. Three stored messages a call, as the fleet's call, queued event
// and result: the fleet's ratio to it is the cost of the fleet's own code.
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
		{Name: storedCallStream(run), Subjects: []string{storedCallSubject(run)}, Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute},
		{Name: storedRecordStream(run), Subjects: []string{storedRecordSubjects(run)}, Retention: jetstream.LimitsPolicy},
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
	// Each call on a goroutine of its own, since storing its answer waits
	// for the stream, as the fleet's worker does.
	r.loop, err = startPullLoop(cons, func(m jetstream.Msg) {
		r.handlers.Go(func() {
			if d := sleepOf(nats.Header(m.Headers())); d > 0 {
				time.Sleep(d)
			}
			id := m.Headers().Get(nats.MsgIdHdr)
			ctx, cancel := context.WithTimeout(context.Background(), rawAnswerWait)
			defer cancel()
			if _, err := sjs.PublishMsg(ctx, &nats.Msg{Subject: answerPrefix + id, Data: []byte(id), Header: nats.Header{nats.MsgIdHdr: []string{"answer:" + id}}}); err != nil {
				return // not acked: redelivered, as a fleet call would be
			}
			_ = m.Ack()
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
	for _, s := range []string{storedCallStream(r.run), storedRecordStream(r.run), storedAnswerStream(r.run)} {
		_ = r.js.DeleteStream(ctx, s)
	}
}

// call returns the stored round trip with payload bytes of data and the
// given responder work.
func (r *rawStored) call(payload int, work time.Duration) CallFunc {
	recordPrefix := "bench.stored." + r.run + ".record."
	return jetStreamRoundTrip(r.js, r.run, &r.seq, &r.pending, storedCallSubject(r.run), payload, work, func(ctx context.Context, id string) error {
		_, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: recordPrefix + id, Data: []byte(id)})
		return err
	})
}
