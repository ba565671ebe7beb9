package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/limits"
)

// Defaults of [Config].
const (
	DefaultPrefix = "windlass:"
	DefaultTTL    = 10 * time.Second
)

// ErrToolNotFound is returned by [Registry.Lookup] for a tool never advertised.
var ErrToolNotFound = errors.New("registry: tool not found")

// Config configures a [Registry]. The zero value of every field but Client
// means its default.
type Config struct {
	// Client is the Redis client. Required. The registry never closes it.
	Client redis.UniversalClient
	// Prefix starts every key and the change channel. Default "windlass:".
	Prefix string
	// TTL is how long a worker's lease lasts without a heartbeat: a worker
	// that dies without withdrawing is dropped after it. Default 10s.
	TTL time.Duration
	// HeartbeatInterval is how often a lease is renewed. Default TTL/3.
	HeartbeatInterval time.Duration
	// ResyncInterval is how often a [View] checks the registry: one read
	// of the version and of the workers' lease expiries (two commands), and
	// a reread of every tool only when the version moved. Default 1s.
	ResyncInterval time.Duration
	// FullResyncInterval is how often a [View] rereads every tool even
	// though the version did not move: a safety net for a change whose
	// version bump was lost (written to a Redis master that failed over
	// before replicating it). Default 1 minute.
	FullResyncInterval time.Duration
	// NoLegacyLayout stops writing the key layout of the releases before
	// the registry sharded (protocol 2's first layout: <prefix>tools,
	// <prefix>tool:<name>, ...). By default a worker writes both layouts,
	// so dispatchers not yet upgraded keep seeing it during a rolling
	// upgrade (see the package doc, "Upgrading"); set it once every
	// dispatcher and CLI reads the new layout. On a Redis Cluster whose
	// prefix has no hash tag the old layout cannot exist (its script fails
	// with CROSSSLOT there) and is never written.
	NoLegacyLayout bool
	// Logger receives warnings (lost heartbeats, re-advertising). Default:
	// discard.
	Logger *slog.Logger
}

// Registry reads and writes the Redis layout described in the package doc.
// It is safe for concurrent use.
type Registry struct {
	cfg Config
}

// withDefaults returns c with every zero field set to its default: the one
// place the registry's defaults are decided.
func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, c.TTL/3)
	c.ResyncInterval = cmp.Or(c.ResyncInterval, time.Second)
	c.FullResyncInterval = cmp.Or(c.FullResyncInterval, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c after defaults; an error names the one field that is
// wrong.
func (c Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("registry: Config.Client is nil: pass a go-redis client")
	case c.TTL < 0:
		return fmt.Errorf("registry: Config.TTL must not be negative, got %s", c.TTL)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("registry: Config.HeartbeatInterval must not be negative, got %s", c.HeartbeatInterval)
	case c.ResyncInterval < 0:
		return fmt.Errorf("registry: Config.ResyncInterval must not be negative, got %s", c.ResyncInterval)
	case c.FullResyncInterval < 0:
		return fmt.Errorf("registry: Config.FullResyncInterval must not be negative, got %s", c.FullResyncInterval)
	case c.HeartbeatInterval >= c.TTL:
		return fmt.Errorf("registry: Config.HeartbeatInterval (%s) must be shorter than Config.TTL (%s)", c.HeartbeatInterval, c.TTL)
	}
	return nil
}

// New returns a registry over cfg.Client.
func New(cfg Config) (*Registry, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Registry{cfg: cfg}, nil
}

// Limits returns the fleet's shared limits over the registry's Redis
// client, under its prefix (see package limits).
func (r *Registry) Limits() *limits.Enforcer { return limits.NewEnforcer(r.cfg.Client, r.cfg.Prefix) }

// TTL returns the lease TTL in force.
func (r *Registry) TTL() time.Duration { return r.cfg.TTL }

// The keys of the layout in the package doc. A tool's keys share the hash
// tag {<name>}, so every script on one tool touches one Redis Cluster slot;
// the keys that span tools share the tag {registry}.
func (r *Registry) toolKey(name string) string { return r.cfg.Prefix + "tool:{" + name + "}" }
func (r *Registry) zsetKey(name string) string { return r.cfg.Prefix + "tool:{" + name + "}:workers" }
func (r *Registry) toolsKey() string           { return r.cfg.Prefix + "{registry}:tools" }
func (r *Registry) versionKey() string         { return r.cfg.Prefix + "{registry}:version" }
func (r *Registry) leasesKey() string          { return r.cfg.Prefix + "{registry}:leases" }
func (r *Registry) workerKey(id string) string { return r.cfg.Prefix + "{registry}:worker:" + id }
func (r *Registry) channel() string            { return r.cfg.Prefix + "changes" }

// ToolInfo is what the registry knows of one tool.
type ToolInfo struct {
	// Spec is the tool's current spec, with defaults.
	Spec windlass.Spec
	// Hash is Spec.Hash() as advertised.
	Hash string
	// Workers are the leases of the tool's workers, live or lapsed, by id.
	Workers []WorkerLease
	// UpdatedAt is when the spec was last written.
	UpdatedAt time.Time
	// Rate is the tool's execution rate (the worker's WithRate) as the
	// worker that took its lease last declared it; zero for none. It is
	// not part of the spec, nor of its hash: workers that declare
	// different rates serve the same tool, each enforcing its own rate on
	// the tool's one shared count (see Advertisement.Rates).
	Rate limits.Rate
}

// WorkerLease is one worker's lease on a tool.
type WorkerLease struct {
	// ID is the worker's id.
	ID string
	// Expires is when the lease lapses without a heartbeat.
	Expires time.Time
}

// HasLiveWorker reports whether any worker's lease is valid at t.
func (t ToolInfo) HasLiveWorker(at time.Time) bool {
	for _, w := range t.Workers {
		if w.Expires.After(at) {
			return true
		}
	}
	return false
}

// LiveWorkers returns the ids of the workers whose lease is valid at t.
func (t ToolInfo) LiveWorkers(at time.Time) []string {
	var ids []string
	for _, w := range t.Workers {
		if w.Expires.After(at) {
			ids = append(ids, w.ID)
		}
	}
	return ids
}

// ConflictError refuses an advertisement whose spec differs from the one the
// tool's live workers advertise.
type ConflictError struct {
	// Tool is the tool whose spec conflicts.
	Tool string
	// Hash is the refused spec's hash; LiveHash the live workers' one.
	Hash, LiveHash string
	// Workers are the live workers advertising LiveHash.
	Workers []string
}

// Error implements error.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("registry: tool %q: spec %s differs from spec %s advertised by live workers %s; advertise with Replace for a rolling upgrade",
		e.Tool, e.Hash, e.LiveHash, strings.Join(e.Workers, ", "))
}

// Lookup returns one tool as Redis has it now.
func (r *Registry) Lookup(ctx context.Context, name string) (ToolInfo, error) {
	infos, err := r.fetch(ctx, []string{name})
	if err != nil {
		return ToolInfo{}, err
	}
	if len(infos) == 0 {
		return ToolInfo{}, fmt.Errorf("%w: %q", ErrToolNotFound, name)
	}
	return infos[0], nil
}

// List returns every tool ever advertised, sorted by name, with its leases.
func (r *Registry) List(ctx context.Context) ([]ToolInfo, error) {
	names, err := r.cfg.Client.SMembers(ctx, r.toolsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("registry: list tools: %w", err)
	}
	slices.Sort(names)
	return r.fetch(ctx, names)
}

// fetch reads the given tools in one pipelined round trip. Tools without a
// spec hash are skipped.
func (r *Registry) fetch(ctx context.Context, names []string) ([]ToolInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	pipe := r.cfg.Client.Pipeline()
	hashes := make([]*redis.MapStringStringCmd, len(names))
	zsets := make([]*redis.ZSliceCmd, len(names))
	for i, n := range names {
		hashes[i] = pipe.HGetAll(ctx, r.toolKey(n))
		zsets[i] = pipe.ZRangeWithScores(ctx, r.zsetKey(n), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("registry: read tools: %w", err)
	}
	infos := make([]ToolInfo, 0, len(names))
	for i, n := range names {
		h := hashes[i].Val()
		if h["spec"] == "" {
			continue
		}
		var spec windlass.Spec
		if err := json.Unmarshal([]byte(h["spec"]), &spec); err != nil {
			return nil, fmt.Errorf("registry: tool %q: decode spec: %w", n, err)
		}
		info := ToolInfo{Spec: spec.WithDefaults(), Hash: h["hash"]}
		// A rate this version cannot read is shown as none: advice only,
		// each worker enforces the rate it declared itself.
		info.Rate, _ = limits.ParseRate(h["rate"])
		if ms, err := strconv.ParseInt(h["updated_ms"], 10, 64); err == nil {
			info.UpdatedAt = time.UnixMilli(ms)
		}
		for _, z := range zsets[i].Val() {
			info.Workers = append(info.Workers, WorkerLease{ID: z.Member.(string), Expires: time.UnixMilli(int64(z.Score))})
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// Advertisement is what a worker announces.
type Advertisement struct {
	// WorkerID identifies the worker; unique in the fleet.
	WorkerID string
	// Specs are the worker's tools.
	Specs []windlass.Spec
	// Replace makes these specs the tools' specs even when live workers
	// advertise others (a rolling upgrade).
	Replace bool
	// Rates are the execution rates the worker enforces, by tool name
	// (tools without one are absent). The tool's hash keeps the rate of
	// the worker that took its lease last; one that declares a rate
	// different from what live workers advertise is logged as a warning,
	// not refused: each worker enforces its own rate on the shared count.
	Rates map[string]limits.Rate
}

func (a Advertisement) validate() error {
	if a.WorkerID == "" || strings.ContainsAny(a.WorkerID, " \t\r\n") {
		return fmt.Errorf("registry: Advertisement.WorkerID %q must be non-empty without spaces", a.WorkerID)
	}
	if len(a.Specs) == 0 {
		return errors.New("registry: Advertisement.Specs is empty: a worker must advertise at least one tool")
	}
	seen := map[string]bool{}
	for _, s := range a.Specs {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("registry: advertisement of worker %q: %w", a.WorkerID, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("registry: advertisement of worker %q names tool %q twice", a.WorkerID, s.Name)
		}
		seen[s.Name] = true
	}
	for name, rate := range a.Rates {
		if !seen[name] {
			return fmt.Errorf("registry: advertisement of worker %q gives a rate for tool %q, which it does not advertise", a.WorkerID, name)
		}
		if err := rate.Validate(); err != nil {
			return fmt.Errorf("registry: advertisement of worker %q, tool %q: %w", a.WorkerID, name, err)
		}
	}
	return nil
}

type workerInfo struct {
	Tools     []string `json:"tools"`
	Host      string   `json:"host"`
	PID       int      `json:"pid"`
	StartedMS int64    `json:"started_ms"`
}
