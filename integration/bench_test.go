package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/worker"
)

// BenchmarkRoundTrip measures Call of a no-op tool through the fleet beside
// a raw JetStream round trip on the same server in the same run: the call
// published durably, a durable pull consumer, the answer back on one shared
// subscription. Each iteration is one call of each, so calls/s, p50 and p99
// are reported for both, with the fleet's ratio to raw.
//
//	go test -run '^$' -bench RoundTrip -benchtime 5000x -count 5 ./integration/
func BenchmarkRoundTrip(b *testing.B) {
	for _, inflight := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			f := newFleet(b, benchNATSOptions())
			raw := newRawRoundTrip(b, f)
			f.startWorker(worker.Config{}, windlass.MustFunc("noop", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil }))
			d := f.dispatcher()
			waitFor(b, 5*time.Second, "noop live", func() bool {
				cat, _ := d.Catalog(context.Background())
				return len(cat) == 1
			})
			fleetCall := func(ctx context.Context) error {
				r, err := d.Call(ctx, "noop", json.RawMessage(`{}`))
				if err == nil && r.IsError {
					err = fmt.Errorf("%s", r.Content)
				}
				return err
			}
			// Warm both paths (connections, consumers, caches).
			runClosedLoop(b, inflight, 200, raw.call)
			runClosedLoop(b, inflight, 200, fleetCall)

			b.ResetTimer()
			rawStats := runClosedLoop(b, inflight, b.N, raw.call)
			fleetStats := runClosedLoop(b, inflight, b.N, fleetCall)
			b.StopTimer()

			b.ReportMetric(rawStats.perSec, "raw-calls/s")
			b.ReportMetric(fleetStats.perSec, "fleet-calls/s")
			b.ReportMetric(fleetStats.perSec/rawStats.perSec, "throughput-ratio")
			b.ReportMetric(float64(rawStats.p50.Microseconds()), "raw-p50-µs")
			b.ReportMetric(float64(fleetStats.p50.Microseconds()), "fleet-p50-µs")
			b.ReportMetric(float64(fleetStats.p50)/float64(rawStats.p50), "p50-ratio")
			b.ReportMetric(float64(rawStats.p99.Microseconds()), "raw-p99-µs")
			b.ReportMetric(float64(fleetStats.p99.Microseconds()), "fleet-p99-µs")
			b.ReportMetric(float64(fleetStats.p99)/float64(rawStats.p99), "p99-ratio")
		})
	}
}

type loopStats struct {
	perSec   float64
	p50, p99 time.Duration
}

// runClosedLoop runs n calls with inflight callers each calling in a loop,
// and returns the rate and latency percentiles.
func runClosedLoop(b *testing.B, inflight, n int, call func(context.Context) error) loopStats {
	b.Helper()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range inflight {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				if err := call(context.Background()); err != nil {
					failed.Store(err)
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("a call failed: %v", err)
	}
	slices.Sort(lat)
	return loopStats{perSec: float64(n) / elapsed.Seconds(), p50: lat[n/2], p99: lat[min(n-1, n*99/100)]}
}

// rawRoundTrip is the baseline: plain JetStream with no fleet code.
type rawRoundTrip struct {
	js      jetstream.JetStream
	pending sync.Map // id -> chan struct{}
	seq     atomic.Int64
}

func newRawRoundTrip(b *testing.B, f *fleet) *rawRoundTrip {
	b.Helper()
	ctx := context.Background()
	callerConn, serverConn := f.nats.Connect(b), f.nats.Connect(b)
	js, _ := jetstream.New(callerConn)
	sjs, _ := jetstream.New(serverConn)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW_CALLS", Subjects: []string{"raw.call.*"}, Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute}); err != nil {
		b.Fatal(err)
	}
	cons, err := sjs.CreateOrUpdateConsumer(ctx, "RAW_CALLS", jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
	if err != nil {
		b.Fatal(err)
	}
	r := &rawRoundTrip{js: js}
	sub, err := callerConn.Subscribe("raw.result.*", func(m *nats.Msg) {
		if ch, ok := r.pending.LoadAndDelete(string(m.Data)); ok {
			close(ch.(chan struct{}))
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			_ = serverConn.Publish("raw.result.x", m.Data()) // the answer: the call id back
			_ = m.Ack()
		}
	}()
	b.Cleanup(func() { it.Stop(); <-done })
	return r
}

func (r *rawRoundTrip) call(ctx context.Context) error {
	id := fmt.Sprintf("raw-%d", r.seq.Add(1))
	ch := make(chan struct{})
	r.pending.Store(id, ch)
	if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: "raw.call.noop", Data: []byte(id), Header: nats.Header{nats.MsgIdHdr: []string{id}}}); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("raw call %s: no answer", id)
	}
}
