package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
)

// toolScript runs one worker's advertisement on one tool, touching only
// the tool's two keys (one slot). It drops lapsed leases, then renews the
// worker's lease if it holds one (never touching the spec or the rate);
// otherwise it refuses a spec differing from the live workers' unless
// replace; otherwise, when take, it writes the spec (if it changed) and
// the rate, and adds the lease.
//
// KEYS: tool hash, workers zset. ARGV: now_ms, expiry_ms, worker id, take,
// replace, spec json, spec hash, rate ("" for none).
// Returns {status, number of lapsed leases dropped, ...}: {'held', n},
// {'free', n} (not taken: take was 0), {'taken', n[, live rate when the
// live workers advertise another]}, or {'conflict', n, live hash, live
// workers...}.
var toolScript = redis.NewScript(`
local now, exp, wid = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local take, replace = ARGV[4] == '1', ARGV[5] == '1'
local spec, hash, rate = ARGV[6], ARGV[7], ARGV[8]
local dropped = tostring(redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now))
if redis.call('ZSCORE', KEYS[2], wid) then
  redis.call('ZADD', KEYS[2], exp, wid)
  return {'held', dropped}
end
local cur = redis.call('HGET', KEYS[1], 'hash')
if not replace and cur and cur ~= hash then
  local live = redis.call('ZRANGE', KEYS[2], 0, -1)
  if #live > 0 then
    local out = {'conflict', dropped, cur}
    for _, w in ipairs(live) do out[#out + 1] = w end
    return out
  end
end
if not take then
  return {'free', dropped}
end
local out = {'taken', dropped}
local liveRate = redis.call('HGET', KEYS[1], 'rate') or ''
if liveRate ~= rate and redis.call('ZCARD', KEYS[2]) > 0 then
  out[3] = liveRate
end
if rate == '' then
  redis.call('HDEL', KEYS[1], 'rate')
else
  redis.call('HSET', KEYS[1], 'rate', rate)
end
if cur ~= hash then
  redis.call('HSET', KEYS[1], 'spec', spec, 'hash', hash, 'updated_ms', now)
end
redis.call('ZADD', KEYS[2], exp, wid)
return out
`)

// commitScript ends an advertisement, in the {registry} slot, after its
// tools' scripts: it drops lapsed entries of the lease index, records the
// worker's lease expiry there and its hash (when it holds a lease), lists
// every tool it holds (a tools set that lost them — the slot's master
// restarted empty, on Redis Cluster, while the tools' keys kept the leases
// — lists them again), and, when a tool's keys changed, a tool was listed
// anew or the version token is gone, writes a new version token and
// announces it. The token is written after the tools' keys, so a view
// that reads it reads their new state.
//
// KEYS: leases zset, version, worker hash, tools set. ARGV: now_ms,
// expiry_ms (0: the worker holds no lease), ttl_ms, worker id, worker
// info json, a new version token, channel, "1" when a tool's keys changed
// (else "0"), then the names of the tools held.
var commitScript = redis.NewScript(`
local now, exp, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if exp > 0 then
  redis.call('ZADD', KEYS[1], exp, ARGV[4])
  redis.call('HSET', KEYS[3], 'info', ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
local listed = 0
for i = 9, #ARGV do
  listed = listed + redis.call('SADD', KEYS[4], ARGV[i])
end
if ARGV[8] == '1' or listed > 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[6])
  redis.call('PUBLISH', ARGV[7], ARGV[6])
end
return 'ok'
`)

// withdrawScript ends a withdrawal, in the {registry} slot, after the
// worker's leases were removed from its tools: it drops the worker from
// the lease index, deletes its hash, and writes and announces a new
// version token.
//
// KEYS: leases zset, version, worker hash. ARGV: worker id, version token,
// channel.
var withdrawScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 'ok'
`)

// newToken returns a fresh version token: random, so that a Redis that
// restarted empty never hands a view a token it already saw.
func newToken() string { return rand.Text() }

// adState is what an advertisement carries from one attempt to the next:
// changes written to tools' keys whose commit (the version bump and the
// tools set) has not been written yet, because the attempt failed between
// the two. The next attempt commits them even when it changes nothing
// itself, so a view never misses a change for a lost bump.
type adState struct {
	unannounced bool
	unlisted    []string
	listed      []string // the tools held, listed again on every commit
	// renewing is set once the advertisement was accepted (Advertise
	// returned its lease): its heartbeats take every tool they can, and a
	// conflict on one (another worker replaced its spec while this one's
	// lease was lost: Redis lost its data, the lease lapsed) is reported
	// without holding back the others, which this worker still serves.
	renewing bool
	// holds: the last attempt left the worker holding a lease on a tool.
	holds bool
}

// toolResult is toolScript's answer.
type toolResult struct {
	status   string // held, free, taken or conflict
	dropped  bool   // lapsed leases were dropped: a change
	liveRate string // taken: the live workers' other rate; conflict: the live hash
	rateDiff bool   // taken: the live workers advertise another rate
	workers  []string
}

func (r *Registry) runTool(ctx context.Context, ad Advertisement, s windlass.Spec, now, exp time.Time, take bool) (toolResult, error) {
	spec, rate, err := encodeTool(ad, s)
	if err != nil {
		return toolResult{}, err
	}
	res, err := toolScript.Run(ctx, r.cfg.Client, []string{r.toolKey(s.Name), r.zsetKey(s.Name)},
		now.UnixMilli(), exp.UnixMilli(), ad.WorkerID, boolArg(take), boolArg(ad.Replace), spec, s.Hash(), rate).StringSlice()
	if err != nil {
		return toolResult{}, fmt.Errorf("registry: advertise worker %q, tool %q: %w", ad.WorkerID, s.Name, err)
	}
	if len(res) < 2 {
		return toolResult{}, fmt.Errorf("registry: advertise worker %q, tool %q: unexpected reply %q", ad.WorkerID, s.Name, res)
	}
	out := toolResult{status: res[0], dropped: res[1] != "0"}
	switch {
	case out.status == "taken" && len(res) > 2:
		out.liveRate, out.rateDiff = res[2], true
	case out.status == "conflict" && len(res) > 2:
		out.liveRate, out.workers = res[2], res[3:]
	}
	return out, nil
}

// advertiseOnce writes the worker's leases: its tools one by one (a tool's
// keys are one slot), then the commit in the {registry} slot. A first pass
// renews the leases the worker holds and looks for conflicts; only when
// there is none does a second pass take the tools it does not hold, so a
// refused advertisement takes nothing — except when renewing (a
// heartbeat): then the second pass takes every tool that does not
// conflict. It returns a *ConflictError on a conflict.
func (r *Registry) advertiseOnce(ctx context.Context, ad Advertisement, started time.Time, st *adState) error {
	var conflict *ConflictError
	if err := r.legacyAdvertise(ctx, ad, started); err != nil {
		if !st.renewing || !errors.As(err, &conflict) {
			return err
		}
	}
	now := time.Now()
	exp := now.Add(r.cfg.TTL)
	held := make([]bool, len(ad.Specs))
	refused := make([]bool, len(ad.Specs))
	for _, take := range []bool{false, true} {
		for i, s := range ad.Specs {
			if held[i] || refused[i] || (take && conflict != nil && !st.renewing) {
				continue
			}
			res, err := r.runTool(ctx, ad, s, now, exp, take)
			if err != nil {
				return err
			}
			st.unannounced = st.unannounced || res.dropped
			switch res.status {
			case "held":
				held[i] = true
			case "taken":
				held[i] = true
				st.unannounced = true
				st.unlisted = append(st.unlisted, s.Name)
				if res.rateDiff {
					r.cfg.Logger.WarnContext(ctx, "registry: a worker declares an execution rate that differs from the one the tool's live workers advertise; each worker enforces its own rate on the tool's shared count, and the registry now shows this one",
						"tool", s.Name, "worker", ad.WorkerID, "rate", ad.Rates[s.Name].String(), "live_rate", cmp.Or(res.liveRate, "none"))
				}
			case "conflict":
				refused[i] = true
				if conflict == nil {
					conflict = &ConflictError{Tool: s.Name, Hash: s.Hash(), LiveHash: res.liveRate, Workers: res.workers}
				}
			}
		}
	}
	st.holds = slices.Contains(held, true)
	st.listed = st.listed[:0]
	for i, s := range ad.Specs {
		if held[i] {
			st.listed = append(st.listed, s.Name)
		}
	}
	if err := r.commit(ctx, ad, started, now, exp, st.holds, st); err != nil {
		return err
	}
	if conflict != nil {
		return conflict
	}
	return nil
}

// commit runs commitScript for an advertisement: the lease index when the
// worker holds a lease, and the version bump when st has changes to
// announce. It writes nothing when there is nothing to write.
func (r *Registry) commit(ctx context.Context, ad Advertisement, started, now, exp time.Time, holds bool, st *adState) error {
	if !holds && !st.unannounced && len(st.unlisted) == 0 {
		return nil
	}
	expMS := int64(0)
	if holds {
		expMS = exp.UnixMilli()
	}
	changed := "0"
	if st.unannounced {
		changed = "1"
	}
	args := []any{now.UnixMilli(), expMS, r.cfg.TTL.Milliseconds(), ad.WorkerID, workerInfoJSON(ad, started), newToken(), r.channel(), changed}
	for _, n := range append(st.listed, st.unlisted...) { // listing one twice does nothing
		args = append(args, n)
	}
	keys := []string{r.leasesKey(), r.versionKey(), r.workerKey(ad.WorkerID), r.toolsKey()}
	if err := commitScript.Run(ctx, r.cfg.Client, keys, args...).Err(); err != nil {
		return fmt.Errorf("registry: advertise worker %q: commit: %w", ad.WorkerID, err)
	}
	st.unannounced, st.unlisted = false, nil
	return nil
}

// names returns the names of the advertised tools.
func (a Advertisement) names() []string {
	names := make([]string, len(a.Specs))
	for i, s := range a.Specs {
		names[i] = s.Name
	}
	return names
}

// encodeTool returns a tool's spec JSON and its rate as the registry
// stores them ("" for none).
func encodeTool(ad Advertisement, s windlass.Spec) (spec, rate string, err error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", "", fmt.Errorf("registry: encode spec of %q: %w", s.Name, err)
	}
	if rt := ad.Rates[s.Name]; !rt.IsZero() {
		rate = rt.String()
	}
	return string(b), rate, nil
}

// workerInfoJSON is the worker hash's info field.
func workerInfoJSON(ad Advertisement, started time.Time) string {
	host, _ := os.Hostname()
	info, _ := json.Marshal(workerInfo{Tools: ad.names(), Host: host, PID: os.Getpid(), StartedMS: started.UnixMilli()})
	return string(info)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// withdraw removes the worker's leases on tools, then its entry in the
// lease index, and bumps the version.
func (r *Registry) withdraw(ctx context.Context, workerID string, tools []string) error {
	pipe := r.cfg.Client.Pipeline()
	for _, t := range tools {
		pipe.ZRem(ctx, r.zsetKey(t), workerID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("registry: withdraw worker %q: %w", workerID, err)
	}
	keys := []string{r.leasesKey(), r.versionKey(), r.workerKey(workerID)}
	if err := withdrawScript.Run(ctx, r.cfg.Client, keys, workerID, newToken(), r.channel()).Err(); err != nil {
		return fmt.Errorf("registry: withdraw worker %q: %w", workerID, err)
	}
	return r.legacyWithdraw(ctx, workerID, tools)
}

// readVersion returns the version token ("" when Redis has none: it
// restarted empty, or nothing was ever advertised) and every worker's
// lease expiry from the index, in one round trip: the cheap check a view
// makes every ResyncInterval.
func (r *Registry) readVersion(ctx context.Context) (string, map[string]time.Time, error) {
	pipe := r.cfg.Client.Pipeline()
	version := pipe.Get(ctx, r.versionKey())
	leases := pipe.ZRangeWithScores(ctx, r.leasesKey(), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", nil, fmt.Errorf("registry: read version: %w", err)
	}
	expiry := make(map[string]time.Time, len(leases.Val()))
	for _, z := range leases.Val() {
		expiry[z.Member.(string)] = time.UnixMilli(int64(z.Score))
	}
	return version.Val(), expiry, nil
}
