package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/windlass-dev/windlass/internal/telemetry/export"
)

// metricsFlag is --metrics-listen of the long-running services.
func metricsFlag(fs *flag.FlagSet) *string {
	return stringFlag(fs, "metrics-listen", "", "address of the Prometheus /metrics endpoint, e.g. :9464 (default: off; OTLP export is set by the OTEL_* variables)")
}

// startTelemetry installs OpenTelemetry export as the OTEL_* environment
// asks (nothing when it asks nothing) and, when metricsAddr is set, serves
// the Prometheus /metrics endpoint there. Call it before the service's
// components are made: they pick their meters up when made. stop flushes
// the exporters and stops the endpoint.
func startTelemetry(ctx context.Context, service, metricsAddr string, log *slog.Logger) (stop func(), err error) {
	tel, err := export.Setup(ctx, export.Config{ServiceName: service, Prometheus: metricsAddr != ""})
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry: %w", err)
	}
	if tel.Traces || tel.Metrics {
		log.Info("telemetry: exporting", "traces", tel.Traces, "metrics", tel.Metrics)
	}
	flush := func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry: flushing the exporters failed", "error", err)
		}
	}
	if metricsAddr == "" {
		return flush, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.Handler)
	stopServer, err := serveHTTP(metricsAddr, "metrics endpoint (/metrics)", mux, log)
	if err != nil {
		flush()
		return nil, fmt.Errorf("--metrics-listen %s: %w", metricsAddr, err)
	}
	return func() { stopServer(); flush() }, nil
}

// clientTelemetry installs OpenTelemetry export as the OTEL_* environment
// asks, for a client command: like startTelemetry without a /metrics
// endpoint, and saying so only at debug level. stop flushes the exporters.
func clientTelemetry(ctx context.Context, service string, log *slog.Logger) (stop func(), err error) {
	tel, err := export.Setup(ctx, export.Config{ServiceName: service})
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry: %w", err)
	}
	log.Debug("telemetry: exporting", "traces", tel.Traces, "metrics", tel.Metrics)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry: flushing the exporters failed", "error", err)
		}
	}, nil
}

// serveHTTP serves h on addr until stop is called; what names the server
// in its logs.
func serveHTTP(addr, what string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Warn(what+" stopped", "error", err)
		}
	}()
	log.Info(what+": serving", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
