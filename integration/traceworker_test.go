package integration_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/worker"
)

// The trace test's worker is a separate process, so that one trace has to
// cross a process boundary in NATS headers: the test binary starts itself
// with these variables set, and TestMain serves the tools "hello" and
// "broken" with an SDK that writes every ended span to a file, one JSON
// object a line (the stdout exporter's format), and logs JSON lines with
// the trace ids of the calls to another.
const (
	traceWorkerEnv   = "WINDLASS_TRACE_WORKER" // the worker's id
	traceNATSEnv     = "WINDLASS_TRACE_NATS_URL"
	traceRedisEnv    = "WINDLASS_TRACE_REDIS_ADDR"
	traceSpansEnv    = "WINDLASS_TRACE_SPANS"
	traceLogEnv      = "WINDLASS_TRACE_LOG"
	traceToolHello   = "hello"
	traceToolBroken  = "broken"
	traceBrokenError = "the flux capacitor is out of flux"
)

func traceTools() []windlass.Tool {
	return []windlass.Tool{
		windlass.MustFunc(traceToolHello, func(ctx context.Context, in struct {
			Name string `json:"name"`
		}) (string, error) {
			return "hello " + in.Name, nil
		}),
		windlass.MustFunc(traceToolBroken, func(ctx context.Context, _ struct{}) (string, error) {
			return "", errors.New(traceBrokenError)
		}),
	}
}

// runTraceWorker is the worker process's main; it returns the exit code.
func runTraceWorker() int {
	id := os.Getenv(traceWorkerEnv)
	spans, err := os.Create(os.Getenv(traceSpansEnv))
	if err != nil {
		return exitCode("trace worker", id, err)
	}
	defer spans.Close()
	logFile, err := os.Create(os.Getenv(traceLogEnv))
	if err != nil {
		return exitCode("trace worker", id, err)
	}
	defer logFile.Close()
	exp, err := stdouttrace.New(stdouttrace.WithWriter(spans))
	if err != nil {
		return exitCode("trace worker", id, err)
	}
	// A syncer: each span is in the file when it ends.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})))
	_, err = runWorkerProcess(os.Getenv(traceNATSEnv), os.Getenv(traceRedisEnv), 2*time.Second,
		worker.Config{ID: id, ShutdownGrace: 5 * time.Second, Logger: log, TracerProvider: tp}, traceTools()...)
	return exitCode("trace worker", id, err)
}
