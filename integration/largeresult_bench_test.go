package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/bench"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// The large-result benchmarks' tools: each returns a prebuilt value of the
// size its arguments ask for, the text as a Go string (its value the
// text's JSON, its content the text, decoded from the value by the
// reader: one object by reference) or as a json.RawMessage of a JSON
// string (content and value the same bytes: one object named twice).
const (
	largeStringTool = "large_string"
	largeJSONTool   = "large_json"
)

type largeArgs struct {
	Size int `json:"size" jsonschema:"minimum=0"`
}

// largeText is n bytes of words, nothing JSON escapes.
func largeText(n int) string {
	var b strings.Builder
	b.Grow(n + 64)
	for i := 0; b.Len() < n; i++ {
		b.WriteString("line ")
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 58))
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// largeTools are the two tools over the prebuilt values of sizes.
func largeTools(sizes ...int) []windlass.Tool {
	texts, values := map[int]string{}, map[int]json.RawMessage{}
	for _, n := range sizes {
		texts[n] = largeText(n)
		values[n], _ = json.Marshal(largeText(n - 2)) // n bytes with its quotes
	}
	return []windlass.Tool{
		windlass.MustFunc(largeStringTool, func(ctx context.Context, in largeArgs) (string, error) {
			if t, ok := texts[in.Size]; ok {
				return t, nil
			}
			return "", fmt.Errorf("no prebuilt text of %d bytes", in.Size)
		}, windlass.WithTimeout(time.Minute)),
		windlass.MustFunc(largeJSONTool, func(ctx context.Context, in largeArgs) (json.RawMessage, error) {
			if v, ok := values[in.Size]; ok {
				return v, nil
			}
			return nil, fmt.Errorf("no prebuilt value of %d bytes", in.Size)
		}, windlass.WithTimeout(time.Minute)),
	}
}

// largeCall is a fleet call of tool for a result of size bytes.
func largeCall(d *dispatcher.Dispatcher, tool string, size int) bench.CallFunc {
	return func(ctx context.Context) error {
		r, err := d.Call(ctx, tool, largeArgs{Size: size}, dispatcher.WithTimeout(time.Minute))
		switch {
		case err != nil:
			return err
		case r.IsError:
			return fmt.Errorf("%s: %s", r.Code(), r.Content)
		case len(r.Content) != size:
			return fmt.Errorf("%s: %d bytes of content, want %d", tool, len(r.Content), size)
		}
		return nil
	}
}

// rawObjectCall is the raw baseline of a large result: one ObjectStore.Put
// of the bytes on one connection, then ObjectStore.Get and a read of them
// all on another, on the same server, in a bucket configured as the
// fleet's payloads bucket and with its chunk size.
func rawObjectCall(put, get jetstream.ObjectStore, data []byte) bench.CallFunc {
	return func(ctx context.Context) error {
		name := "raw." + nuid.Next()
		meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: 256 << 10}}
		if _, err := put.Put(ctx, meta, bytes.NewReader(data)); err != nil {
			return err
		}
		res, err := get.Get(ctx, name)
		if err != nil {
			return err
		}
		defer res.Close()
		got, err := io.ReadAll(res)
		if err != nil {
			return err
		}
		if len(got) != len(data) {
			return fmt.Errorf("raw: got %d bytes, want %d", len(got), len(data))
		}
		return nil
	}
}

// rawBucket opens, on a connection of its own, the raw baseline's object
// store: the fleet's payloads bucket's configuration under another name.
func rawBucket(b *testing.B, f *fleettest.Fleet, create bool) jetstream.ObjectStore {
	b.Helper()
	cfg := layout.PayloadsConfig(layout.StreamOptions{})
	cfg.Bucket = "BENCH_RAW_PAYLOADS"
	js := f.JetStream()
	var obs jetstream.ObjectStore
	var err error
	if create {
		obs, err = js.CreateObjectStore(b.Context(), cfg)
	} else {
		obs, err = js.ObjectStore(b.Context(), cfg.Bucket)
	}
	if err != nil {
		b.Fatal(err)
	}
	return obs
}

// purgeBuckets empties the fleet's payloads bucket and the raw one between
// sub-benchmarks, so that each starts with the same store.
func purgeBuckets(b *testing.B, js jetstream.JetStream) {
	b.Helper()
	for _, name := range []string{"OBJ_" + layout.PayloadsBucket, "OBJ_BENCH_RAW_PAYLOADS"} {
		s, err := js.Stream(b.Context(), name)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Purge(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLargeResult measures a fleet round trip whose result is 1 MiB
// and 10 MiB (small arguments; the tool returns a prebuilt value, so its
// content and value travel by reference through the payloads bucket)
// beside the raw baseline of the same bytes through a JetStream object
// store (one Put, then Get and a read of it all), on the same server in
// the same run: each iteration is one call of each path, in turn at 1 and
// 4 in flight. Two fleet paths: a tool returning a string (one object,
// its JSON; the reader decodes the content from it) and one returning a
// json.RawMessage (content and value the same bytes: one object). Reported: calls/s, p50, and the fleet's ratios to the raw
// baseline (throughput: fleet/raw, under 1 is slower; p50: fleet/raw,
// over 1 is slower).
//
//	go test -run '^$' -bench 'LargeResult$' -benchtime 20x -count 3 ./integration/
func BenchmarkLargeResult(b *testing.B) {
	sizes := []int{1 << 20, 10 << 20}
	f := newFleet(b)
	f.StartWorker(worker.Config{}, largeTools(sizes...)...)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(b, d, largeStringTool, largeJSONTool)
	put, get := rawBucket(b, f, true), rawBucket(b, f, false)
	js := f.JetStream()
	for _, size := range sizes {
		data := []byte(largeText(size))
		for _, inflight := range []int{1, 4} {
			b.Run(fmt.Sprintf("size=%dMiB/inflight=%d", size>>20, inflight), func(b *testing.B) {
				ctx := context.Background()
				paths := []bench.CallFunc{rawObjectCall(put, get, data), largeCall(d, largeStringTool, size), largeCall(d, largeJSONTool, size)}
				for _, call := range paths { // connections, consumers, buffers
					bench.Measure(ctx, bench.Load{InFlight: inflight, Calls: 2 * inflight}, call, nil)
				}
				purgeBuckets(b, js)
				b.ResetTimer()
				var stats [3]bench.Stats
				for i, call := range paths {
					if stats[i] = bench.Measure(ctx, bench.Load{InFlight: inflight, Calls: b.N}, call, nil); stats[i].Errors > 0 {
						b.Fatalf("%d calls failed: %s", stats[i].Errors, stats[i].FirstError)
					}
				}
				b.StopTimer()
				purgeBuckets(b, js)
				raw, str, raw1 := stats[0], stats[1], stats[2]
				b.ReportMetric(raw.PerSec, "raw-calls/s")
				b.ReportMetric(str.PerSec, "fleet-calls/s")
				b.ReportMetric(raw1.PerSec, "json-calls/s")
				b.ReportMetric(str.PerSec/raw.PerSec, "throughput-ratio")
				b.ReportMetric(raw1.PerSec/raw.PerSec, "json-throughput-ratio")
				b.ReportMetric(raw.P50/1000, "raw-p50-ms")
				b.ReportMetric(str.P50/1000, "fleet-p50-ms")
				b.ReportMetric(raw1.P50/1000, "json-p50-ms")
				b.ReportMetric(str.P50/raw.P50, "p50-ratio")
				b.ReportMetric(raw1.P50/raw.P50, "json-p50-ratio")
			})
		}
	}
}
