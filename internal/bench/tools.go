package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// The bench tools' names.
const (
	// NoopTool answers at once.
	NoopTool = "bench_noop"
	// SleepTool answers after sleeping the milliseconds it is given.
	SleepTool = "bench_sleep"
)

// noopArgs are bench_noop's arguments: a payload it ignores.
type noopArgs struct {
	Data string `json:"data,omitempty" jsonschema:"description=Payload; ignored"`
}

// sleepArgs are bench_sleep's arguments.
type sleepArgs struct {
	Data string  `json:"data,omitempty" jsonschema:"description=Payload; ignored"`
	MS   float64 `json:"ms" jsonschema:"description=How long to sleep in milliseconds,minimum=0,maximum=3600000"`
}

// Tools returns the bench tools.
func Tools() []windlass.Tool {
	return []windlass.Tool{
		windlass.MustFunc(NoopTool, func(context.Context, noopArgs) (int, error) { return 1, nil },
			windlass.WithDescription("Benchmark tool: answers at once.")),
		windlass.MustFunc(SleepTool, func(ctx context.Context, in sleepArgs) (int, error) {
			t := time.NewTimer(time.Duration(in.MS * float64(time.Millisecond)))
			defer t.Stop()
			select {
			case <-t.C:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}, windlass.WithDescription("Benchmark tool: answers after sleeping ms milliseconds."), windlass.WithTimeout(time.Hour)),
	}
}

// WorkerConfig configures [ServeWorker].
type WorkerConfig struct {
	// Conn is the worker's NATS connection. Required.
	Conn *nats.Conn
	// Registry is where it advertises the bench tools. Required.
	Registry *registry.Registry
	// Concurrency bounds the calls of each tool running at once. Default
	// 1024. The process's bound is this times the number of tools: a
	// worker's open pull for one tool reserves slots (up to 256) while it
	// waits, which must not starve the other.
	Concurrency int
	// Ready, when set, is called with the worker just before it runs.
	Ready func(*worker.Worker)
	// Logger receives the worker's logs. Default: discard.
	Logger *slog.Logger
}

// ServeWorker runs a worker of the bench tools until ctx ends, then drains
// it as any worker does.
func ServeWorker(ctx context.Context, cfg WorkerConfig) error {
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return fmt.Errorf("bench: worker: %w", err)
	}
	n := cfg.Concurrency
	if n <= 0 {
		n = worker.DefaultMaxConcurrency
	}
	w, err := worker.New(worker.Config{JetStream: js, Registry: cfg.Registry, MaxConcurrency: n * len(Tools()), Logger: cfg.Logger, ShutdownGrace: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("bench: worker: %w", err)
	}
	for _, t := range Tools() {
		if err := w.Register(t, worker.WithConcurrency(n)); err != nil {
			return fmt.Errorf("bench: worker: %w", err)
		}
	}
	if cfg.Ready != nil {
		cfg.Ready(w)
	}
	return w.Run(ctx)
}
