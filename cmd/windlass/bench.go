package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/internal/bench"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "bench [flags]", stderr)
	natsURL := stringFlag(fs, "nats-url", "", "NATS server to measure (default: an embedded server on a free port)")
	redisURL := stringFlag(fs, "redis-url", "", "Redis of the registry: "+redisURLUsage+" (default: a redis-server child process on a free port)")
	prefix := stringFlag(fs, "redis-prefix", registry.DefaultPrefix, "prefix of the registry's Redis keys")
	inflight := stringFlag(fs, "inflight", "1,8,64,512", "closed loops: calls in flight, comma-separated (empty: none)")
	rates := stringFlag(fs, "rates", "", "open loops: calls a second, comma-separated; latency from each call's intended start")
	payloads := stringFlag(fs, "payloads", "128", "sizes of a call's arguments in bytes, comma-separated (e.g. 128,1024,8192)")
	tools := stringFlag(fs, "tools", "noop", "tools to call, comma-separated: noop (answers at once), sleep (answers after --sleep)")
	duration := durationFlag(fs, "duration", 0, "length of each path's run in each scenario when --calls is 0 (default 2s)")
	calls := intFlag(fs, "calls", 0, "calls of each path in each scenario (0: run for --duration)")
	sleep := durationFlag(fs, "sleep", 0, "how long the sleep tool (and its raw baselines) works per call (default 100ms)")
	asJSON := boolFlag(fs, "json", false, "print the report as JSON")
	syncAlways := boolFlag(fs, "sync-always", false, "embedded NATS syncs every write before acknowledging it (deploy/nats's setting)")
	concurrency := intFlag(fs, "concurrency", worker.DefaultMaxConcurrency, "calls of each bench tool the bench worker runs at once")
	external := boolFlag(fs, "external-worker", false, "start no worker here: a 'windlass bench --serve' process serves the bench tools")
	serve := boolFlag(fs, "serve", false, "only serve the bench tools as a worker (against --nats-url and --redis-url) until interrupted")
	logLevel := stringFlag(fs, "log-level", "error", "log level of the fleet's logs on stderr: debug, info, warn, error")
	readLimits := limitsFlags(fs) // the measured dispatcher's, as `windlass dispatcher`'s
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	lim, err := readLimits()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(pos) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", fs.Name(), pos)}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--log-level %q: use debug, info, warn or error", *logLevel)}
	}
	if *redisURL != "" {
		if _, err := parseRedisURL(*redisURL); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *serve {
		return serveBench(ctx, *natsURL, *redisURL, *prefix, *concurrency, stdout, log)
	}

	cfg := bench.Config{Calls: *calls, Duration: *duration, Sleep: *sleep}
	if cfg.InFlight, err = parseList(*inflight, "inflight", strconv.Atoi); err != nil {
		return err
	}
	if cfg.Rates, err = parseList(*rates, "rates", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		return err
	}
	if cfg.Payloads, err = parseList(*payloads, "payloads", strconv.Atoi); err != nil {
		return err
	}
	if cfg.Tools, err = parseList(*tools, "tools", benchTool); err != nil {
		return err
	}
	if cfg.InFlight == nil {
		cfg.InFlight = []int{} // none given: open loops only
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(cfg.Scenarios()) == 0 {
		return &exitError{code: 2, err: fmt.Errorf("no scenario: give --inflight or --rates")}
	}
	cfg.Progress = func(p bench.Progress) {
		fmt.Fprintf(stderr, "\r[%d/%d] %-32s %-13s %7d calls %5.1fs  ", p.Index, p.Of, p.Scenario, p.Path, p.Done, p.Elapsed)
	}

	env, err := bench.Start(ctx, bench.Options{NATSURL: *natsURL, RedisURL: *redisURL, RedisPrefix: *prefix,
		SyncAlways: *syncAlways, ExternalWorker: *external, Concurrency: *concurrency, Limits: lim, Logger: log})
	if err != nil {
		return err
	}
	defer env.Close()
	rep, err := env.Run(ctx, cfg)
	fmt.Fprintln(stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return bench.WriteTable(stdout, rep)
}

// serveBench runs a worker of the bench tools until ctx ends.
func serveBench(ctx context.Context, natsURL, redisURL, prefix string, concurrency int, stdout io.Writer, log *slog.Logger) error {
	if natsURL == "" || redisURL == "" {
		return &exitError{code: 2, err: fmt.Errorf("--serve needs --nats-url and --redis-url")}
	}
	nc, err := nats.Connect(natsURL, nats.Name("windlass bench worker"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
	}
	defer nc.Close()
	rc, err := redisClient(redisURL)
	if err != nil {
		return err
	}
	defer rc.Close()
	reg, err := registry.New(registry.Config{Client: rc, Prefix: prefix, Logger: log})
	if err != nil {
		return err
	}
	return bench.ServeWorker(ctx, bench.WorkerConfig{Conn: nc, Registry: reg, Concurrency: concurrency, Logger: log,
		Ready: func(w *worker.Worker) {
			fmt.Fprintf(stdout, "worker %s serving %s, %s (concurrency %d)\n", w.ID(), bench.NoopTool, bench.SleepTool, concurrency)
		}})
}

// benchTool reads a tool of --tools: noop, sleep, or their full names.
func benchTool(s string) (string, error) {
	switch s {
	case "noop", bench.NoopTool:
		return bench.NoopTool, nil
	case "sleep", bench.SleepTool:
		return bench.SleepTool, nil
	}
	return "", fmt.Errorf("unknown tool %q: use noop or sleep", s)
}

// parseList reads a comma-separated flag value; empty is none.
func parseList[T any](s, flagName string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		v, err := parse(part)
		if err != nil {
			return nil, &exitError{code: 2, err: fmt.Errorf("--%s %q: %w", flagName, part, err)}
		}
		out = append(out, v)
	}
	return out, nil
}
