// Package fleettest is the tests' shared set-up of a fleet: one test's own
// NATS and Redis servers (from internal/testserver), registry clients,
// workers serving tools and dispatchers, and the poll that waits for a
// condition with a deadline.
//
// Every test makes its own [Fleet]; fleets are never shared between tests.
// Everything a Fleet starts ends when the test does (workers stopped and
// waited for, dispatchers closed, servers shut down), so a package's goleak
// check in TestMain holds.
//
// The package imports worker, dispatcher and registry, so only those
// packages' external tests (package x_test) can use it, not their internal
// ones: that would be an import cycle.
//
// The functions and methods call t.Fatalf on failure, so they must be called
// from the goroutine running the test.
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// PollInterval is how often [WaitFor] checks its condition.
const PollInterval = 10 * time.Millisecond

// StartTimeout bounds the waits of [Fleet.StartWorker] and [WaitCatalog]: a
// worker advertised, a dispatcher's view showing it. Generous, because on a
// loaded machine (the whole suite beside other work) starting takes seconds;
// the waits return as soon as the event happens.
const StartTimeout = 30 * time.Second

// WaitFor polls cond every [PollInterval] until it holds, and returns how
// long that took. It fails the test with "what: not within d" once within
// has passed. It is the tests' one way to wait for an event they cannot be
// told of by a channel: a stats counter, a stream's state, a registry entry.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(PollInterval)
	}
	return time.Since(start)
}

// StoredResult is the result message the results stream stores for
// callID, waited for: the server hands a result to live subscribers (a
// Call or Wait returning) a moment before the stream has stored it.
func StoredResult(t testing.TB, js jetstream.JetStream, callID string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	WaitFor(t, 10*time.Second, "the stored result of "+callID, func() bool {
		m, err = s.GetLastMsgForSubject(t.Context(), layout.ResultByCall(callID))
		return err == nil
	})
	return m
}

// Option configures [New].
type Option func(*options)

type options struct {
	nats     testserver.NATSOptions
	redis    testserver.RedisOptions
	registry registry.Config
	cluster  int  // masters of a Redis Cluster; 0: none
	sentinel bool // a Sentinel set
}

// WithNATS starts the fleet's NATS server with opts.
func WithNATS(opts testserver.NATSOptions) Option { return func(o *options) { o.nats = opts } }

// WithRedis starts the fleet's Redis server with opts.
func WithRedis(opts testserver.RedisOptions) Option { return func(o *options) { o.redis = opts } }

// WithRedisCluster runs the fleet's Redis as a Redis Cluster of masters
// nodes ([Fleet.RedisCluster]) instead of one server.
func WithRedisCluster(masters int) Option { return func(o *options) { o.cluster = masters } }

// WithRedisSentinel runs the fleet's Redis as a master, a replica and three
// sentinels ([Fleet.RedisSentinel]) instead of one server; the fleet's
// clients follow the master through a failover.
func WithRedisSentinel() Option { return func(o *options) { o.sentinel = true } }

// WithRegistryTTL sets the lease TTL of the fleet's registry clients. Default
// the registry's (registry.DefaultTTL).
func WithRegistryTTL(ttl time.Duration) Option {
	return func(o *options) { o.registry.TTL = ttl }
}

// WithResyncInterval sets how often the registry views of the fleet's
// dispatchers reread every tool. Default 100ms, so that a test sees a lapsed
// lease soon.
func WithResyncInterval(d time.Duration) Option {
	return func(o *options) { o.registry.ResyncInterval = d }
}

// Fleet is one test's NATS and Redis servers, and what it starts on them.
type Fleet struct {
	// NATS is the fleet's NATS server, with JetStream.
	NATS *testserver.NATS
	// Redis is the fleet's Redis server, where the registry lives; nil
	// with WithRedisCluster or WithRedisSentinel.
	Redis *testserver.Redis
	// RedisCluster is the fleet's Redis with WithRedisCluster, else nil.
	RedisCluster *testserver.RedisCluster
	// RedisSentinel is the fleet's Redis with WithRedisSentinel, else nil.
	RedisSentinel *testserver.RedisSentinel

	t      testing.TB
	regCfg registry.Config
	reg    *registry.Registry
}

// New starts a NATS server and a Redis server (or a Cluster, or a Sentinel
// set: see the options) for the test, and makes the
// fleet's own registry client ([Fleet.Registry]). Both servers stop when the
// test ends.
func New(t testing.TB, opts ...Option) *Fleet {
	t.Helper()
	o := options{registry: registry.Config{ResyncInterval: 100 * time.Millisecond}}
	for _, opt := range opts {
		opt(&o)
	}
	f := &Fleet{t: t, NATS: testserver.StartNATS(t, o.nats), regCfg: o.registry}
	switch {
	case o.cluster > 0:
		f.RedisCluster = testserver.StartRedisCluster(t, o.cluster)
	case o.sentinel:
		f.RedisSentinel = testserver.StartRedisSentinel(t)
	default:
		f.Redis = testserver.StartRedis(t, o.redis)
	}
	f.reg = f.NewRegistry()
	return f
}

// Registry is the test's own registry client: the one to look tools up with
// and to hand to a component the test builds itself.
func (f *Fleet) Registry() *registry.Registry { return f.reg }

// NewRegistry returns a new registry client, on a Redis client of its own
// (closed when the test ends), configured by New's options. Each worker and
// dispatcher the fleet starts gets one, as separate processes would.
func (f *Fleet) NewRegistry() *registry.Registry {
	f.t.Helper()
	cfg := f.regCfg
	cfg.Client = f.RedisClient()
	reg, err := registry.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return reg
}

// RedisClient returns a new client of the fleet's Redis, whatever its
// deployment (one server, a Cluster, Sentinel), closed when the test ends.
func (f *Fleet) RedisClient() redis.UniversalClient {
	f.t.Helper()
	switch {
	case f.RedisCluster != nil:
		return f.RedisCluster.Client(f.t)
	case f.RedisSentinel != nil:
		return f.RedisSentinel.Client(f.t)
	}
	return f.Redis.Client(f.t)
}

// RedisURL returns the URL of the fleet's Redis, in the form of
// internal/redisurl, for a process of the windlass binary.
func (f *Fleet) RedisURL() string {
	switch {
	case f.RedisCluster != nil:
		return f.RedisCluster.URL()
	case f.RedisSentinel != nil:
		return f.RedisSentinel.URL()
	}
	return f.Redis.URL()
}

// Conn returns a new connection to the fleet's NATS server, closed when the
// test ends.
func (f *Fleet) Conn() *nats.Conn { return f.NATS.Connect(f.t) }

// JetStream returns a JetStream context on a new connection ([Fleet.Conn]).
func (f *Fleet) JetStream() jetstream.JetStream {
	f.t.Helper()
	js, err := jetstream.New(f.Conn())
	if err != nil {
		f.t.Fatal(err)
	}
	return js
}

// RefuseResults makes the results stream refuse every write (it is full,
// new messages discarded: a fault a real server shows as a store failure
// or a stream without quorum) until resume, which the test's cleanup also
// calls, so that a worker can answer and stop should the test fail.
func (f *Fleet) RefuseResults() (resume func()) {
	f.t.Helper()
	js := f.JetStream()
	s, err := js.Stream(f.t.Context(), layout.ResultsStream)
	if err != nil {
		f.t.Fatal(err)
	}
	healthy := s.CachedInfo().Config
	full := healthy
	full.MaxBytes, full.Discard = 1, jetstream.DiscardNew
	if _, err := js.UpdateStream(f.t.Context(), full); err != nil {
		f.t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if _, err := js.UpdateStream(context.Background(), healthy); err != nil {
				f.t.Errorf("fleettest: the results stream takes writes again: %v", err)
			}
		})
	}
	f.t.Cleanup(resume)
	return resume
}

// Worker is a worker started by [Fleet.StartWorker].
type Worker struct {
	*worker.Worker

	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's, once done is closed
	once   sync.Once
}

// Stop ends the worker's Run (a graceful shutdown, see the worker package)
// and waits until it returns; it returns Run's error. It may be called more
// than once; the test's cleanup calls it too, and reports a Run error.
func (w *Worker) Stop() error {
	w.once.Do(w.cancel)
	<-w.done
	return w.err
}

// toolWithOptions is a tool with the options to register it with.
type toolWithOptions struct {
	windlass.Tool
	opts []worker.ToolOption
}

// WithToolOptions returns tool, for [Fleet.StartWorker], to be registered
// with opts (concurrency, retries, ...).
func WithToolOptions(tool windlass.Tool, opts ...worker.ToolOption) windlass.Tool {
	return toolWithOptions{Tool: tool, opts: opts}
}

// StartWorker starts a worker serving tools (see [WithToolOptions]) until
// the test ends or [Worker.Stop], and waits until the fleet's registry lists
// it as a live worker of each tool. It fills in cfg's JetStream, on a
// connection of its own, and, when nil, cfg's Registry ([Fleet.NewRegistry]).
// The test fails at once if Run returns while it waits.
func (f *Fleet) StartWorker(cfg worker.Config, tools ...windlass.Tool) *Worker {
	f.t.Helper()
	cfg.JetStream = f.JetStream()
	if cfg.Registry == nil {
		cfg.Registry = f.NewRegistry()
	}
	w, err := worker.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	names := make([]string, len(tools))
	for i, tool := range tools {
		var opts []worker.ToolOption
		if to, ok := tool.(toolWithOptions); ok {
			tool, opts = to.Tool, to.opts
		}
		if err := w.Register(tool, opts...); err != nil {
			f.t.Fatal(err)
		}
		names[i] = tool.Spec().Name
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &Worker{Worker: w, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		rw.err = w.Run(ctx)
	}()
	f.t.Cleanup(func() {
		if err := rw.Stop(); err != nil {
			f.t.Errorf("worker %s: Run = %v", w.ID(), err)
		}
	})
	WaitFor(f.t, StartTimeout, "worker "+w.ID()+" advertised", func() bool {
		select {
		case <-rw.done:
			f.t.Fatalf("worker %s: Run returned %v while starting", w.ID(), rw.err)
		default:
		}
		for _, name := range names {
			info, err := f.reg.Lookup(context.Background(), name)
			if err != nil || !slices.Contains(info.LiveWorkers(time.Now()), w.ID()) {
				return false
			}
		}
		return true
	})
	return rw
}

// Dispatcher returns a dispatcher, closed when the test ends. It fills in
// cfg's Conn, when nil, with a connection of its own, and cfg's Registry,
// when nil, with [Fleet.NewRegistry].
func (f *Fleet) Dispatcher(cfg dispatcher.Config) *dispatcher.Dispatcher {
	f.t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = f.Conn()
	}
	if cfg.Registry == nil {
		cfg.Registry = f.NewRegistry()
	}
	d, err := dispatcher.New(f.t.Context(), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = d.Close() })
	return d
}

// WaitCatalog waits until d's catalog lists exactly the tools named, in any
// order: each with a live worker in d's view, and no other.
func WaitCatalog(t testing.TB, d *dispatcher.Dispatcher, names ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(names))
	WaitFor(t, StartTimeout, fmt.Sprintf("the dispatcher's catalog listing %q", want), func() bool {
		cat, _ := d.Catalog(context.Background())
		got := make([]string, len(cat))
		for i, e := range cat {
			got[i] = e.Spec.Name
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	})
}

// CallIDOf is the id of the call a raw call message body holds, for the
// subject a test publishes it on (layout.CallSubject); "unreadable" when
// it holds none: garbage needs a subject too.
func CallIDOf(body []byte) string {
	var c struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(body, &c) != nil || c.ID == "" {
		return "unreadable"
	}
	return c.ID
}
