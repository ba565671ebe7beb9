package registry

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The legacy layout is the one written before the registry sharded (see
// the package doc, "Upgrading"). A worker keeps writing it beside the new
// one, unless Config.NoLegacyLayout, so that dispatchers not yet upgraded
// keep seeing it; nothing reads it any more.
func (r *Registry) legacyToolsKey() string           { return r.cfg.Prefix + "tools" }
func (r *Registry) legacyToolKey(name string) string { return r.cfg.Prefix + "tool:" + name }
func (r *Registry) legacyZsetKey(name string) string {
	return r.cfg.Prefix + "tool:" + name + ":workers"
}
func (r *Registry) legacyWorkerKey(id string) string { return r.cfg.Prefix + "worker:" + id }

// legacyOn reports whether the registry writes the legacy layout: unless
// told not to, and unless the client is a Redis Cluster client and the
// prefix has no hash tag, where the legacy layout's scripts fail with
// CROSSSLOT, so no worker of the old releases could have written it.
func (r *Registry) legacyOn() bool {
	if r.cfg.NoLegacyLayout {
		return false
	}
	if _, cluster := r.cfg.Client.(*redis.ClusterClient); cluster {
		open := strings.IndexByte(r.cfg.Prefix, '{')
		return open >= 0 && strings.IndexByte(r.cfg.Prefix[open+1:], '}') > 0
	}
	return true
}

// legacyAdvertiseScript is the advertise script of the legacy layout,
// unchanged: it writes a worker's lease on each tool atomically. For each
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
var legacyAdvertiseScript = redis.NewScript(`
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

// legacyWithdrawScript removes, in the legacy layout, a worker's leases and its hash, announcing each tool.
// KEYS: worker hash, then the tools' zsets. ARGV: worker id, channel, names.
var legacyWithdrawScript = redis.NewScript(`
for i = 2, #KEYS do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[2], ARGV[i + 1])
  end
end
redis.call('DEL', KEYS[1])
return 'ok'
`)

// legacyAdvertise writes the worker's leases in the legacy layout, first:
// a spec that conflicts with the one live workers of the old releases
// advertise is refused as it was before the upgrade.
func (r *Registry) legacyAdvertise(ctx context.Context, ad Advertisement, started time.Time) error {
	if !r.legacyOn() {
		return nil
	}
	now := time.Now()
	keys := make([]string, 0, 2+2*len(ad.Specs))
	keys = append(keys, r.legacyToolsKey(), r.legacyWorkerKey(ad.WorkerID))
	args := []any{now.UnixMilli(), now.Add(r.cfg.TTL).UnixMilli(), r.cfg.TTL.Milliseconds(), ad.WorkerID, workerInfoJSON(ad, started), boolArg(ad.Replace), r.channel()}
	for _, s := range ad.Specs {
		spec, rate, err := encodeTool(ad, s)
		if err != nil {
			return err
		}
		keys = append(keys, r.legacyToolKey(s.Name), r.legacyZsetKey(s.Name))
		args = append(args, s.Name, spec, s.Hash(), rate)
	}
	res, err := legacyAdvertiseScript.Run(ctx, r.cfg.Client, keys, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("registry: advertise worker %q in the legacy layout: %w", ad.WorkerID, err)
	}
	if len(res) >= 4 && res[0] == "conflict" {
		return &ConflictError{Tool: res[1], Hash: res[2], LiveHash: res[3], Workers: res[4:]}
	}
	return nil
}

// legacyWithdraw removes the worker's leases from the legacy layout.
func (r *Registry) legacyWithdraw(ctx context.Context, workerID string, tools []string) error {
	if !r.legacyOn() {
		return nil
	}
	keys := []string{r.legacyWorkerKey(workerID)}
	args := []any{workerID, r.channel()}
	for _, t := range tools {
		keys = append(keys, r.legacyZsetKey(t))
		args = append(args, t)
	}
	if err := legacyWithdrawScript.Run(ctx, r.cfg.Client, keys, args...).Err(); err != nil {
		return fmt.Errorf("registry: withdraw worker %q from the legacy layout: %w", workerID, err)
	}
	return nil
}
