package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	// ResyncInterval is how often a [View] rereads every tool, to pick up
	// renewed and lapsed leases and any change announcement it missed.
	// Default 1s.
	ResyncInterval time.Duration
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

func (r *Registry) toolsKey() string           { return r.cfg.Prefix + "tools" }
func (r *Registry) toolKey(name string) string { return r.cfg.Prefix + "tool:" + name }
func (r *Registry) zsetKey(name string) string { return r.cfg.Prefix + "tool:" + name + ":workers" }
func (r *Registry) workerKey(id string) string { return r.cfg.Prefix + "worker:" + id }
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

// advertiseScript writes a worker's lease on each tool atomically. For each
// tool: drop lapsed leases; renew the lease of a worker that holds one
// (never touching the spec or the rate); otherwise refuse a spec differing
// from live workers' unless replace; else write the spec and the rate
// (noting a rate that differs from the one live workers advertise) and
// add the lease. Then the worker's own hash, with its TTL. Changed tools
// are announced.
//
// KEYS: tools set, worker hash, then per tool: tool hash, workers zset.
// ARGV: now_ms, expiry_ms, ttl_ms, worker id, worker info json, replace, channel,
// then per tool: name, spec json, spec hash, rate ("" for none).
// Returns {'ok', changed, then name and live rate of each tool whose live
// workers advertise another rate}, or {'conflict', name, hash, live hash,
// live workers...}.
var advertiseScript = redis.NewScript(`
local now, exp, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local wid, info, replace, channel = ARGV[4], ARGV[5], ARGV[6] == '1', ARGV[7]
local n = (#KEYS - 2) / 2
local renew = {}
for i = 0, n - 1 do
  local tkey, zkey = KEYS[3 + 2*i], KEYS[4 + 2*i]
  local name, hash = ARGV[8 + 4*i], ARGV[10 + 4*i]
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now)
  if redis.call('ZSCORE', zkey, wid) then
    renew[i] = true
  elseif not replace then
    local cur = redis.call('HGET', tkey, 'hash')
    if cur and cur ~= hash then
      local live = redis.call('ZRANGE', zkey, 0, -1)
      if #live > 0 then
        local out = {'conflict', name, hash, cur}
        for _, w in ipairs(live) do out[#out + 1] = w end
        return out
      end
    end
  end
end
local changed = 0
local rates = {}
for i = 0, n - 1 do
  local tkey, zkey = KEYS[3 + 2*i], KEYS[4 + 2*i]
  local name, spec, hash, rate = ARGV[8 + 4*i], ARGV[9 + 4*i], ARGV[10 + 4*i], ARGV[11 + 4*i]
  if not renew[i] then
    local liveRate = redis.call('HGET', tkey, 'rate') or ''
    if liveRate ~= rate and redis.call('ZCARD', zkey) > 0 then
      rates[#rates + 1] = name
      rates[#rates + 1] = liveRate
    end
    if rate == '' then
      redis.call('HDEL', tkey, 'rate')
    else
      redis.call('HSET', tkey, 'rate', rate)
    end
  end
  redis.call('ZADD', zkey, exp, wid)
  if not renew[i] then
    local cur = redis.call('HGET', tkey, 'hash')
    if cur ~= hash then
      redis.call('HSET', tkey, 'spec', spec, 'hash', hash, 'updated_ms', now)
    end
    redis.call('SADD', KEYS[1], name)
    redis.call('PUBLISH', channel, name)
    changed = changed + 1
  end
end
redis.call('HSET', KEYS[2], 'info', info)
redis.call('PEXPIRE', KEYS[2], ttl)
local out = {'ok', tostring(changed)}
for _, v in ipairs(rates) do out[#out + 1] = v end
return out
`)

// withdrawScript removes a worker's leases and its hash, announcing each tool.
// KEYS: worker hash, then the tools' zsets. ARGV: worker id, channel, names.
var withdrawScript = redis.NewScript(`
for i = 2, #KEYS do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[2], ARGV[i + 1])
  end
end
redis.call('DEL', KEYS[1])
return 'ok'
`)

type workerInfo struct {
	Tools     []string `json:"tools"`
	Host      string   `json:"host"`
	PID       int      `json:"pid"`
	StartedMS int64    `json:"started_ms"`
}

// advertiseOnce runs the advertise script. It returns a *ConflictError on a
// conflict.
func (r *Registry) advertiseOnce(ctx context.Context, ad Advertisement, started time.Time) error {
	now := time.Now()
	keys := make([]string, 0, 2+2*len(ad.Specs))
	keys = append(keys, r.toolsKey(), r.workerKey(ad.WorkerID))
	names := make([]string, 0, len(ad.Specs))
	args := []any{now.UnixMilli(), now.Add(r.cfg.TTL).UnixMilli(), r.cfg.TTL.Milliseconds(), ad.WorkerID, "", boolArg(ad.Replace), r.channel()}
	for _, s := range ad.Specs {
		spec, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("registry: encode spec of %q: %w", s.Name, err)
		}
		rate := ""
		if rt := ad.Rates[s.Name]; !rt.IsZero() {
			rate = rt.String()
		}
		keys = append(keys, r.toolKey(s.Name), r.zsetKey(s.Name))
		args = append(args, s.Name, string(spec), s.Hash(), rate)
		names = append(names, s.Name)
	}
	host, _ := os.Hostname()
	info, _ := json.Marshal(workerInfo{Tools: names, Host: host, PID: os.Getpid(), StartedMS: started.UnixMilli()})
	args[4] = string(info)

	res, err := advertiseScript.Run(ctx, r.cfg.Client, keys, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("registry: advertise worker %q: %w", ad.WorkerID, err)
	}
	if len(res) >= 4 && res[0] == "conflict" {
		return &ConflictError{Tool: res[1], Hash: res[2], LiveHash: res[3], Workers: res[4:]}
	}
	for i := 2; i+1 < len(res); i += 2 {
		tool, live := res[i], cmp.Or(res[i+1], "none")
		r.cfg.Logger.WarnContext(ctx, "registry: a worker declares an execution rate that differs from the one the tool's live workers advertise; each worker enforces its own rate on the tool's shared count, and the registry now shows this one",
			"tool", tool, "worker", ad.WorkerID, "rate", ad.Rates[tool].String(), "live_rate", live)
	}
	return nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// withdraw removes the worker's leases on tools.
func (r *Registry) withdraw(ctx context.Context, workerID string, tools []string) error {
	keys := []string{r.workerKey(workerID)}
	args := []any{workerID, r.channel()}
	for _, t := range tools {
		keys = append(keys, r.zsetKey(t))
		args = append(args, t)
	}
	if err := withdrawScript.Run(ctx, r.cfg.Client, keys, args...).Err(); err != nil {
		return fmt.Errorf("registry: withdraw worker %q: %w", workerID, err)
	}
	return nil
}
