package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/redisurl"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// Options configures [Start]. The zero value runs everything in this
// process: an embedded NATS server, a redis-server child process, a worker
// of the bench tools and a dispatcher.
type Options struct {
	// NATSURL is the NATS server to measure. Empty: an in-process server
	// with JetStream on a free port, its store in a temporary directory.
	NATSURL string
	// RedisURL is the registry's Redis. Empty: a redis-server child
	// process on a free port (redis-server must be on PATH).
	RedisURL string
	// RedisPrefix is the registry's key prefix. Default
	// registry.DefaultPrefix.
	RedisPrefix string
	// SyncAlways makes the embedded NATS server sync every write before
	// acknowledging it (the production setting of deploy/nats).
	SyncAlways bool
	// ExternalWorker starts no worker in this process: a worker of the
	// bench tools (windlass bench --serve) runs elsewhere.
	ExternalWorker bool
	// Concurrency of the in-process worker, per tool. Default 1024.
	Concurrency int
	// Limits are the admission limits of the dispatcher measured as
	// "fleet". The zero value is the protective defaults, what a
	// dispatcher configured with nothing enforces (one Redis round trip
	// a call); limits.Unlimited() has none. [Env.FleetLimited] measures
	// others beside it.
	Limits limits.Config
	// Logger receives the fleet's logs. Default: discard.
	Logger *slog.Logger
}

// Env is a fleet to measure and its baselines: connections, a dispatcher,
// a worker of the bench tools unless it runs elsewhere, and the raw
// responders. Close it.
type Env struct {
	run        string
	natsURL    string
	redisURL   string
	natsSrv    *testserver.NATS
	redisSrv   *testserver.Redis
	conns      []*nats.Conn
	clients    []redis.UniversalClient
	d          *dispatcher.Dispatcher
	others     []*dispatcher.Dispatcher // FleetLimited's
	opts       Options
	log        *slog.Logger
	raw        *raw
	rawStored  *rawStored
	stopWorker context.CancelFunc
	workerDone chan error
	closeOnce  sync.Once
}

// Start sets up a fleet to measure and waits until the dispatcher sees the
// bench tools live.
func Start(ctx context.Context, opts Options) (e *Env, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e = &Env{run: strings.ToUpper(rand.Text()[:8]), natsURL: opts.NATSURL, redisURL: opts.RedisURL, opts: opts, log: log}
	defer func() {
		if err != nil {
			e.Close()
			e = nil
		}
	}()
	for _, step := range []func() error{
		func() error { return e.startServers(opts) },
		func() error { return e.startWorker(ctx, opts, log) },
		func() error { return e.startDispatcher(ctx, opts, log) },
		func() error { return e.startRaw(ctx) },
		func() error { return e.waitLive(ctx, e.d, 30*time.Second) },
	} {
		if err := step(); err != nil {
			return e, err // the deferred cleanup closes e, then returns nil
		}
	}
	return e, nil
}

// startServers starts an embedded NATS and Redis for the URLs not given.
func (e *Env) startServers(opts Options) error {
	var err error
	if e.natsURL == "" {
		if e.natsSrv, err = testserver.NewNATS(testserver.NATSOptions{SyncAlways: opts.SyncAlways}); err != nil {
			return fmt.Errorf("bench: embedded NATS: %w", err)
		}
		e.natsURL = e.natsSrv.URL()
	}
	if e.redisURL == "" {
		if e.redisSrv, err = testserver.NewRedis(); err != nil {
			return fmt.Errorf("bench: embedded Redis: %w", err)
		}
		e.redisURL = e.redisSrv.URL()
	}
	return nil
}

// conn opens a NATS connection, closed by Close.
func (e *Env) conn(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(e.natsURL, nats.Name("windlass bench "+name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to NATS at %s: %w", e.natsURL, err)
	}
	e.conns = append(e.conns, nc)
	return nc, nil
}

// registry opens a registry on its own Redis client, closed by Close.
func (e *Env) registry(opts Options, log *slog.Logger) (*registry.Registry, error) {
	rc, err := redisurl.New(e.redisURL)
	if err != nil {
		return nil, fmt.Errorf("bench: Redis URL %w", err)
	}
	e.clients = append(e.clients, rc)
	return registry.New(registry.Config{Client: rc, Prefix: cmp.Or(opts.RedisPrefix, registry.DefaultPrefix), Logger: log})
}

// startWorker serves the bench tools in this process, unless the options
// say a worker runs elsewhere.
func (e *Env) startWorker(ctx context.Context, opts Options, log *slog.Logger) error {
	if opts.ExternalWorker {
		return nil
	}
	wc, err := e.conn("worker")
	if err != nil {
		return err
	}
	wr, err := e.registry(opts, log)
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stopWorker, e.workerDone = stop, make(chan error, 1)
	go func() {
		e.workerDone <- ServeWorker(wctx, WorkerConfig{Conn: wc, Registry: wr, Concurrency: opts.Concurrency, Logger: log})
	}()
	return nil
}

// startDispatcher opens the dispatcher the fleet is measured through.
func (e *Env) startDispatcher(ctx context.Context, opts Options, log *slog.Logger) (err error) {
	e.d, err = e.dispatcher(ctx, "dispatcher", opts.Limits)
	return err
}

// dispatcher opens a dispatcher with admission limits lim on a NATS
// connection and a Redis client of its own, closed by Close.
func (e *Env) dispatcher(ctx context.Context, name string, lim limits.Config) (*dispatcher.Dispatcher, error) {
	dc, err := e.conn(name)
	if err != nil {
		return nil, err
	}
	dr, err := e.registry(e.opts, e.log)
	if err != nil {
		return nil, err
	}
	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: dc, Registry: dr, Limits: lim, Logger: e.log})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return d, nil
}

// startRaw starts the raw JetStream baselines: the plain round trip and
// the one that stores what the fleet stores.
func (e *Env) startRaw(ctx context.Context) error {
	callerConn, err := e.conn("raw caller")
	if err != nil {
		return err
	}
	serverConn, err := e.conn("raw responder")
	if err != nil {
		return err
	}
	if e.raw, err = startRaw(ctx, e.run, callerConn, serverConn); err != nil {
		return err
	}
	e.rawStored, err = startRawStored(ctx, e.run, callerConn, serverConn)
	return err
}

// waitLive waits until d's view has both bench tools live.
func (e *Env) waitLive(ctx context.Context, d *dispatcher.Dispatcher, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		cat, _ := d.Catalog(ctx)
		live := 0
		for _, entry := range cat {
			if entry.Spec.Name == NoopTool || entry.Spec.Name == SleepTool {
				live++
			}
		}
		if live == 2 {
			return nil
		}
		select {
		case err := <-e.workerDone:
			e.workerDone <- err
			return fmt.Errorf("bench: the worker stopped: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("bench: the bench tools are not live within %s (with --external-worker, start `windlass bench --serve` against the same servers)", within)
		case <-t.C:
		}
	}
}

// Close stops the worker and the responders, closes the connections and
// stops the embedded servers.
func (e *Env) Close() {
	e.closeOnce.Do(func() {
		if e.raw != nil {
			e.raw.close()
		}
		if e.rawStored != nil {
			e.rawStored.close()
		}
		if e.d != nil {
			_ = e.d.Close()
		}
		for _, d := range e.others {
			_ = d.Close()
		}
		if e.stopWorker != nil {
			e.stopWorker()
			<-e.workerDone
		}
		for _, nc := range e.conns {
			nc.Close()
		}
		for _, rc := range e.clients {
			_ = rc.Close()
		}
		if e.redisSrv != nil {
			e.redisSrv.Close()
		}
		if e.natsSrv != nil {
			e.natsSrv.Close()
		}
	})
}

// NATSURL is the measured NATS server's URL.
func (e *Env) NATSURL() string { return e.natsURL }

// RedisURL is the registry's Redis URL.
func (e *Env) RedisURL() string { return e.redisURL }

// Dispatcher is the fleet's dispatcher.
func (e *Env) Dispatcher() *dispatcher.Dispatcher { return e.d }

// Arguments returns bench arguments for tool, about payload bytes encoded;
// sleep is bench_sleep's sleep.
func Arguments(tool string, payload int, sleep time.Duration) json.RawMessage {
	args := map[string]any{}
	if tool == SleepTool {
		args["ms"] = float64(sleep) / float64(time.Millisecond)
	}
	base, _ := json.Marshal(args)
	if pad := payload - len(base) - len(`,"data":""`); pad > 0 {
		args["data"] = strings.Repeat("x", pad)
	}
	b, _ := json.Marshal(args)
	return b
}

// Fleet returns a call of tool through the fleet with about payload bytes
// of arguments; sleep is bench_sleep's.
func (e *Env) Fleet(tool string, payload int, sleep time.Duration) CallFunc {
	return fleetCall(e.d, tool, payload, sleep)
}

// FleetLimited is [Env.Fleet] through another dispatcher of the same
// fleet (its own NATS connection and Redis client, as the measured
// dispatcher's), whose admission limits are lim: the cost of limits is
// its calls/s beside FleetLimited(limits.Unlimited(), …)'s in the same
// run. Each FleetLimited opens a dispatcher, closed by Close; ctx bounds
// its start. Dispatchers with limits share their counts in Redis: measure
// them one after the other.
func (e *Env) FleetLimited(ctx context.Context, lim limits.Config, tool string, payload int, sleep time.Duration) (CallFunc, error) {
	d, err := e.dispatcher(ctx, fmt.Sprintf("dispatcher %d", len(e.others)+2), lim)
	if err != nil {
		return nil, err
	}
	e.others = append(e.others, d)
	if err := e.waitLive(ctx, d, 30*time.Second); err != nil {
		return nil, err
	}
	return fleetCall(d, tool, payload, sleep), nil
}

// fleetCall is a call of tool through d; see [Env.Fleet].
func fleetCall(d *dispatcher.Dispatcher, tool string, payload int, sleep time.Duration) CallFunc {
	args := Arguments(tool, payload, sleep)
	return func(ctx context.Context) error {
		r, err := d.Call(ctx, tool, args)
		if err != nil {
			return err
		}
		if r.IsError {
			return errors.New(r.Content)
		}
		return nil
	}
}

// RawJetStream returns the raw JetStream round trip with payload bytes of
// data, whose responder works for work before answering.
func (e *Env) RawJetStream(payload int, work time.Duration) CallFunc {
	return e.raw.jetStreamCall(payload, work)
}

// RawStored returns the raw JetStream round trip that stores what the
// fleet stores for a call (the call and the answer; see rawStored), with payload bytes of data and work before answering.
func (e *Env) RawStored(payload int, work time.Duration) CallFunc {
	return e.rawStored.call(payload, 0, work)
}

// RawStoredSized is RawStored whose answers carry answer bytes after the
// call id: the two stores of a call at the sizes of another path's
// messages (the fleet's carry records and headers that the baseline's do
// not), to tell the cost of the bytes from the cost of the code.
func (e *Env) RawStoredSized(payload, answer int, work time.Duration) CallFunc {
	return e.rawStored.call(payload, answer, work)
}

// Traffic is what the NATS server received from and sent to its clients,
// counted in messages and bytes (its varz: JetStream's internal messages
// not included, the acknowledgements it sends included).
type Traffic struct {
	InMsgs, OutMsgs, InBytes, OutBytes int64
}

// ServerTraffic returns the embedded NATS server's traffic so far; false
// when the server measured is not this process's (Options.NATSURL).
func (e *Env) ServerTraffic() (Traffic, bool) {
	if e.natsSrv == nil {
		return Traffic{}, false
	}
	v, err := e.natsSrv.Server().Varz(nil)
	if err != nil {
		return Traffic{}, false
	}
	return Traffic{InMsgs: v.InMsgs, OutMsgs: v.OutMsgs, InBytes: v.InBytes, OutBytes: v.OutBytes}, true
}

// RawRequest returns core NATS request/reply with payload bytes of data,
// whose responder works for work before answering.
func (e *Env) RawRequest(payload int, work time.Duration) CallFunc {
	return e.raw.requestCall(payload, work)
}

// Versions reports the NATS server's and Redis's versions.
func (e *Env) Versions(ctx context.Context) (natsVersion, redisVersion string) {
	if len(e.conns) > 0 {
		natsVersion = e.conns[0].ConnectedServerVersion()
	}
	if len(e.clients) > 0 {
		info, err := e.clients[0].Info(ctx, "server").Result()
		if err == nil {
			for line := range strings.SplitSeq(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					redisVersion = v
				}
			}
		}
	}
	return natsVersion, redisVersion
}
