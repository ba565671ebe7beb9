package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/windlass-dev/windlass/internal/retry"
)

// The baselines' names. They are the benchmark's own, outside the fleet's
// subjects and streams (internal/layout), and carry the run's id so that
// runs against one server never meet; the stream is deleted on Close.
func rawStreamName(run string) string    { return "BENCH_RAW_" + run }
func rawCallSubject(run string) string   { return "bench.raw." + run + ".call" }
func rawAnswerSubject(run string) string { return "bench.raw." + run + ".answer" }
func rawRequestSubject(run string) string {
	return "bench.raw." + run + ".request"
}

// sleepHeader carries the work a raw responder does for a call, in
// microseconds, so one responder serves every scenario.
const sleepHeader = "Bench-Sleep-Us"

// answerSizeHeader carries how many bytes the stored baseline's responder
// adds to its answer after the call id (see Env.RawStoredSized).
const answerSizeHeader = "Bench-Answer-Bytes"

// rawAnswerWait bounds the wait for a raw answer.
const rawAnswerWait = 30 * time.Second

// raw holds both baselines: a raw JetStream round trip and core NATS
// request/reply, each with its own caller and responder connections.
type raw struct {
	run               string
	js                jetstream.JetStream
	callerConn        *nats.Conn
	reqConn           *nats.Conn
	pending           sync.Map // id -> chan struct{}
	seq               atomic.Int64
	loop              *pullLoop
	answers, requests *nats.Subscription
	responders        sync.WaitGroup
}

// startRaw sets up the baselines: callerConn calls, serverConn answers.
func startRaw(ctx context.Context, run string, callerConn, serverConn *nats.Conn) (*raw, error) {
	js, sjs, err := jetStreams(callerConn, serverConn)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: rawStreamName(run), Subjects: []string{rawCallSubject(run)},
		Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute, Storage: jetstream.FileStorage}); err != nil {
		return nil, fmt.Errorf("bench: raw stream: %w", err)
	}
	r := &raw{run: run, js: js, callerConn: callerConn, reqConn: callerConn}
	cons, err := sjs.CreateOrUpdateConsumer(ctx, rawStreamName(run), jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
	if err != nil {
		r.deleteStream()
		return nil, fmt.Errorf("bench: raw consumer: %w", err)
	}
	if r.answers, err = callerConn.Subscribe(rawAnswerSubject(run), answered(&r.pending)); err != nil {
		r.deleteStream()
		return nil, fmt.Errorf("bench: raw answers: %w", err)
	}
	_ = r.answers.SetPendingLimits(-1, -1)
	if r.requests, err = serverConn.QueueSubscribe(rawRequestSubject(run), "bench", func(m *nats.Msg) {
		if d := sleepOf(m.Header); d > 0 {
			r.responders.Go(func() { time.Sleep(d); _ = m.Respond([]byte("1")) })
			return
		}
		_ = m.Respond([]byte("1"))
	}); err != nil {
		r.close()
		return nil, fmt.Errorf("bench: raw responder: %w", err)
	}
	_ = r.requests.SetPendingLimits(-1, -1)
	r.loop, err = startPullLoop(cons, func(m jetstream.Msg) {
		answer := func() {
			// The answer (the call id back) on one shared subscription,
			// then the ack, as the fleet answers first.
			_ = serverConn.Publish(rawAnswerSubject(run), []byte(m.Headers().Get(nats.MsgIdHdr)))
			_ = m.Ack()
		}
		if d := sleepOf(nats.Header(m.Headers())); d > 0 {
			r.responders.Go(func() { time.Sleep(d); answer() })
			return
		}
		answer()
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("bench: raw pull: %w", err)
	}
	return r, nil
}

// pullLoop hands every message of a baseline's consumer to its handler, on
// one goroutine, until stop.
type pullLoop struct {
	it   jetstream.MessagesContext
	done chan struct{}
}

func startPullLoop(cons jetstream.Consumer, handle func(jetstream.Msg)) (*pullLoop, error) {
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, err
	}
	l := &pullLoop{it: it, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			handle(m)
		}
	}()
	return l, nil
}

// stop ends the loop and waits for it; a nil loop is stopped already.
func (l *pullLoop) stop() {
	if l != nil {
		l.it.Stop()
		<-l.done
	}
}

// jetStreams is the JetStream client of a baseline's caller and of its
// responder.
func jetStreams(callerConn, serverConn *nats.Conn) (js, sjs jetstream.JetStream, err error) {
	if js, err = jetstream.New(callerConn); err != nil {
		return nil, nil, err
	}
	if sjs, err = jetstream.New(serverConn); err != nil {
		return nil, nil, err
	}
	return js, sjs, nil
}

func sleepOf(h nats.Header) time.Duration {
	us, _ := strconv.Atoi(h.Get(sleepHeader))
	return time.Duration(us) * time.Microsecond
}

func (r *raw) deleteStream() {
	ctx, cancel := context.WithTimeout(context.Background(), retry.WriteTimeout)
	defer cancel()
	_ = r.js.DeleteStream(ctx, rawStreamName(r.run))
}

// close stops the responders and deletes the raw stream.
func (r *raw) close() {
	r.loop.stop()
	if r.requests != nil {
		_ = r.requests.Unsubscribe()
	}
	if r.answers != nil {
		_ = r.answers.Unsubscribe()
	}
	r.responders.Wait()
	r.deleteStream()
}

// jetStreamCall returns a raw JetStream round trip with payload bytes of
// data and the given responder work.
func (r *raw) jetStreamCall(payload int, work time.Duration) CallFunc {
	return jetStreamRoundTrip(r.js, r.run, &r.seq, &r.pending, func(string) string { return rawCallSubject(r.run) }, payload, 0, work)
}

// jetStreamRoundTrip returns a call of a JetStream baseline: publish a call
// of payload bytes to subject(id) (its id the message id, the responder's
// work in a header, and the answer's extra bytes when answer > 0) and wait
// for the stream's ack, then for the answer.
func jetStreamRoundTrip(js jetstream.JetStream, run string, seq *atomic.Int64, pending *sync.Map, subject func(id string) string, payload, answer int, work time.Duration) CallFunc {
	data := filled(payload)
	sleep := strconv.FormatInt(work.Microseconds(), 10)
	answerSize := strconv.Itoa(answer)
	return func(ctx context.Context) error {
		id := run + "-" + strconv.FormatInt(seq.Add(1), 10)
		ch := make(chan struct{})
		pending.Store(id, ch)
		h := nats.Header{nats.MsgIdHdr: []string{id}}
		if work > 0 {
			h[sleepHeader] = []string{sleep}
		}
		if answer > 0 {
			h[answerSizeHeader] = []string{answerSize}
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject(id), Data: data, Header: h}); err != nil {
			pending.Delete(id)
			return err
		}
		return awaitAnswer(ctx, pending, id, ch)
	}
}

// answered is the handler of a baseline's answers subscription: an answer
// is the call id (then, in a sized answer, a space and its padding), and it
// releases the call waiting for it.
func answered(pending *sync.Map) nats.MsgHandler {
	return func(m *nats.Msg) {
		id, _, _ := bytes.Cut(m.Data, []byte{' '})
		if ch, ok := pending.LoadAndDelete(string(id)); ok {
			close(ch.(chan struct{}))
		}
	}
}

// awaitAnswer waits until the answer to call id closes ch, for at most
// rawAnswerWait.
func awaitAnswer(ctx context.Context, pending *sync.Map, id string, ch chan struct{}) error {
	t := time.NewTimer(rawAnswerWait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		pending.Delete(id)
		return ctx.Err()
	case <-t.C:
		pending.Delete(id)
		return fmt.Errorf("bench: call %s: no answer within %s", id, rawAnswerWait)
	}
}

// filled is a payload of n bytes.
func filled(n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = 'x'
	}
	return data
}

// requestCall returns a core NATS request/reply with payload bytes of data
// and the given responder work.
func (r *raw) requestCall(payload int, work time.Duration) CallFunc {
	data := filled(payload)
	var h nats.Header // none for a no-op: the leanest request
	if work > 0 {
		h = nats.Header{sleepHeader: []string{strconv.FormatInt(work.Microseconds(), 10)}}
	}
	subject := rawRequestSubject(r.run)
	return func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, rawAnswerWait)
			defer cancel()
		}
		_, err := r.reqConn.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data, Header: h})
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("bench: raw request: no answer: %w", err)
		}
		return err
	}
}
