package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// healthFlag is --health-listen of the long-running services.
// Bounds of the command's waits: a readiness probe's Redis ping, a server's
// or the telemetry exporters' shutdown, and dev's self-check.
const (
	probeTimeout    = time.Second
	shutdownTimeout = 5 * time.Second
	devReadyTimeout = 15 * time.Second
)

func healthFlag(fs *flag.FlagSet) *string {
	return stringFlag(fs, "health-listen", "", "address of the /healthz (process) and /readyz (NATS and Redis reachable) probes, e.g. :8081 (default: off)")
}

// serveHealth serves the probes on addr until stop is called; an empty
// addr serves nothing. /healthz answers 200 while the process runs;
// /readyz answers 200 while the NATS connection is up and Redis answers
// PING, else 503 naming what is down.
func serveHealth(addr string, nc *nats.Conn, rc redis.UniversalClient, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "nats: "+nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		if err := rc.Ping(ctx).Err(); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	stop, err = serveHTTP(addr, "health probes (/healthz, /readyz)", mux, log)
	if err != nil {
		return nil, fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	return stop, nil
}
