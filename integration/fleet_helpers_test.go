package integration_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// fleet is one test's NATS, Redis and registry, with helpers to start
// workers and dispatchers on them.
type fleet struct {
	t     testing.TB
	nats  *testserver.NATS
	redis *testserver.Redis
	ttl   time.Duration
}

func newFleet(t testing.TB, opts ...testserver.NATSOptions) *fleet {
	t.Helper()
	return &fleet{t: t, nats: testserver.StartNATS(t, opts...), redis: testserver.StartRedis(t), ttl: 2 * time.Second}
}

func (f *fleet) registry() *registry.Registry {
	f.t.Helper()
	reg, err := registry.New(registry.Config{Client: f.redis.Client(f.t), TTL: f.ttl, ResyncInterval: 200 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	return reg
}

func (f *fleet) conn() *nats.Conn { return f.nats.Connect(f.t) }

// runningWorker is a worker started by startWorker.
type runningWorker struct {
	*worker.Worker
	stop func() // ends Run's context and waits for Run to return
	err  error
}

// startWorker starts a worker with the tools, its own NATS connection and
// registry client, and waits until it is serving.
func (f *fleet) startWorker(cfg worker.Config, tools ...windlass.Tool) *runningWorker {
	f.t.Helper()
	js, err := jetstream.New(f.conn())
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.JetStream = js
	if cfg.Registry == nil {
		cfg.Registry = f.registry()
	}
	w, err := worker.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, tool := range tools {
		if err := w.Register(tool); err != nil {
			f.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{Worker: w}
	var wg sync.WaitGroup
	wg.Go(func() { rw.err = w.Run(ctx) })
	var once sync.Once
	rw.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	f.t.Cleanup(rw.stop)
	// Serving once the registry lists it for each of its tools.
	reg := cfg.Registry
	waitFor(f.t, 10*time.Second, "worker "+w.ID()+" advertised", func() bool {
		for _, tool := range tools {
			info, err := reg.Lookup(context.Background(), tool.Spec().Name)
			if err != nil || !contains(info.LiveWorkers(time.Now()), w.ID()) {
				return false
			}
		}
		return true
	})
	return rw
}

func (f *fleet) dispatcher() *dispatcher.Dispatcher {
	f.t.Helper()
	d, err := dispatcher.New(f.t.Context(), dispatcher.Config{Conn: f.conn(), Registry: f.registry()})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = d.Close() })
	return d
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}
