package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// runWorkerProcess is the body of a worker process of the tests (the test
// binary started again, see TestMain): it connects to NATS (reconnecting
// forever) and Redis, advertises in a registry with the lease ttl, and runs
// a worker configured by cfg with the tools until SIGTERM or Ctrl-C. It
// returns the worker, for its stats, and what kept it from running.
func runWorkerProcess(natsURL, redisAddr string, ttl time.Duration, cfg worker.Config, tools ...windlass.Tool) (*worker.Worker, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(natsURL, nats.Name("worker-"+cfg.ID),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	rc := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	if cfg.Registry, err = registry.New(registry.Config{Client: rc, TTL: ttl, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if cfg.JetStream, err = jetstream.New(nc); err != nil {
		return nil, err
	}
	w, err := worker.New(cfg)
	if err != nil {
		return nil, err
	}
	for _, tool := range tools {
		if err := w.Register(tool); err != nil {
			return nil, err
		}
	}
	return w, w.Run(ctx)
}

// exitCode reports a worker process's failure on stderr and returns its
// exit code.
func exitCode(role, id string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s %s: %v\n", role, id, err)
	return 1
}
