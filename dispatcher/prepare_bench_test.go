package dispatcher_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/bench"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// BenchmarkPrepare measures, through the export_test.go hook, the dispatcher's own work per call before the
// publish — the tool looked up in the in-memory view, the arguments
// validated against the compiled schema, the call and its headers encoded
// — for the bench tools' arguments of 128 B, 1 KiB and 8 KiB. The target
// is under 10 µs and a handful of allocations:
//
//	go test -run '^$' -bench Prepare -benchmem ./dispatcher/
func BenchmarkPrepare(b *testing.B) {
	nc := testserver.StartNATS(b)
	reg, err := registry.New(registry.Config{Client: testserver.StartRedis(b).Client(b)})
	if err != nil {
		b.Fatal(err)
	}
	var specs []windlass.Spec
	for _, t := range bench.Tools() {
		specs = append(specs, t.Spec())
	}
	lease, err := reg.Advertise(b.Context(), registry.Advertisement{WorkerID: "bench-worker", Specs: specs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	d, err := dispatcher.New(b.Context(), dispatcher.Config{Conn: nc.Connect(b), Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	for _, tool := range []string{bench.NoopTool, bench.SleepTool} {
		for _, size := range []int{128, 1024, 8192} {
			args := bench.Arguments(tool, size, 0)
			b.Run(fmt.Sprintf("%s/%dB", tool, size), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				b.SetBytes(int64(len(args)))
				for b.Loop() {
					if err := d.Prepare(ctx, tool, args); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	// A caller's own id (a model's tool-call id) also costs the canonical
	// hash of the arguments, which makes a resubmit with other arguments an
	// id_conflict.
	for _, size := range []int{128, 1024, 8192} {
		args := bench.Arguments(bench.NoopTool, size, 0)
		b.Run(fmt.Sprintf("%s/%dB/own-id", bench.NoopTool, size), func(b *testing.B) {
			ctx := context.Background()
			own := dispatcher.WithCallID("toolu_01bench")
			b.ReportAllocs()
			b.SetBytes(int64(len(args)))
			for b.Loop() {
				if err := d.Prepare(ctx, bench.NoopTool, args, own); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSubmit measures Submit, one call after another, with the
// default admission limits on: the call prepared, its slot written to
// Redis (a submitted call's slot is freed by its worker, so it is asked
// for, not taken behind the publish) and the call published and
// acknowledged. A worker answers the calls meanwhile, freeing their slots.
//
//	go test -run '^$' -bench Submit -benchmem ./dispatcher/
func BenchmarkSubmit(b *testing.B) {
	f := fleettest.New(b)
	tools := bench.Tools()
	f.StartWorker(worker.Config{}, tools...)
	d := f.Dispatcher(dispatcher.Config{})
	var names []string
	for _, t := range tools {
		names = append(names, t.Spec().Name)
	}
	fleettest.WaitCatalog(b, d, names...)
	args := bench.Arguments(bench.NoopTool, 128, 0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Submit(ctx, bench.NoopTool, args); err != nil {
			b.Fatal(err)
		}
	}
}
