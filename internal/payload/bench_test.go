package payload_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// BenchmarkPutBesideAcks uploads 48 MiB while another goroutine makes a
// round trip to the server on the same connection every 20 ms (a flush: a
// message that goes behind what the connection sent before it, as a
// worker's in-progress ack does), unpaced (the object store's own
// publishing) and paced (the store's): it reports the upload's speed and
// the slowest of those round trips, in ms.
func BenchmarkPutBesideAcks(b *testing.B) {
	for _, paced := range []bool{false, true} {
		name := "unpaced"
		if paced {
			name = "paced"
		}
		b.Run(name, func(b *testing.B) {
			nc := testserver.StartNATS(b).Connect(b)
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			obs, err := layout.EnsurePayloads(b.Context(), js, layout.StreamOptions{})
			if err != nil {
				b.Fatal(err)
			}
			s := payload.New(obs, nil)
			if paced {
				s = payload.New(obs, nc)
			}
			data := strings.Repeat("b", 48<<20)
			b.SetBytes(int64(len(data)))
			var worst time.Duration
			for b.Loop() {
				stop := make(chan struct{})
				var pinger sync.WaitGroup
				var slowest time.Duration
				pinger.Go(func() {
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						t0 := time.Now()
						if err := nc.FlushTimeout(30 * time.Second); err != nil {
							b.Error(err)
							return
						}
						slowest = max(slowest, time.Since(t0))
					}
				})
				if _, err := s.PutString(b.Context(), layout.PayloadContent, "bench", data); err != nil {
					b.Fatal(err)
				}
				close(stop)
				pinger.Wait()
				worst = max(worst, slowest)
			}
			b.ReportMetric(float64(worst)/float64(time.Millisecond), "worst-ack-ms")
		})
	}
}
