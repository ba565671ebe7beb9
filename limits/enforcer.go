package limits

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Reason says which limit refused a call: a metric label and a log field.
type Reason string

// The reasons a call is refused.
const (
	// ReasonRate: the key's rate for the tool (code rate_limited).
	ReasonRate Reason = "rate"
	// ReasonInFlight: the key's cap of calls queued or running for the
	// tool (code rate_limited).
	ReasonInFlight Reason = "in_flight"
	// ReasonToolQueue: the tool's cap of calls queued or running, all
	// keys together (code overloaded).
	ReasonToolQueue Reason = "tool_queue"
	// ReasonCallsStream: the calls stream is full (code overloaded).
	ReasonCallsStream Reason = "calls_stream"
)

// SlotRetryAfter is the wait suggested to a caller refused for a cap: a
// slot frees when one of the calls holding them ends, which the fleet
// cannot foresee.
const SlotRetryAfter = time.Second

// Decision is the outcome of [Enforcer.Admit].
type Decision struct {
	// Allowed reports that the call may be published.
	Allowed bool
	// Reason names the limit that refused it (empty when allowed).
	Reason Reason
	// RetryAfter is when the caller may try again (refused only).
	RetryAfter time.Duration
	// Slot is the slot the call holds, to Free when it ends; nil when
	// the call holds none here: no cap applies, or the id held its slot
	// already (a resubmit, whose first submit releases it).
	Slot *Slot
	// KeyInFlight and ToolInFlight are how many calls hold a slot under
	// the key's cap and the tool's after the decision (when the caps were
	// asked).
	KeyInFlight, ToolInFlight int
	// Held reports that the call's id holds its slot already, which this
	// decision neither allows nor refuses: it is a resubmit of a call
	// admitted before (the same call: allowed without a second slot or
	// charge), or another submit of the id being admitted this very
	// moment, which its rate may yet refuse or its caller abandon (its
	// slot then freed). The caller tells which: the dispatcher admits it
	// once the call's record shows the other submit accepted, else asks
	// again, and takes a slot still held then for the same call's.
	Held bool
}

// leaseKey names a rate's lease: a tool × key under one rate (a rate
// reconfigured starts a lease of its own).
type leaseKey struct {
	tool, key string
	rate      Rate
}

// Slot is a call's place under its key's and its tool's caps.
type Slot struct {
	tool, key, callID string
	// written is, for a slot taken without asking, where its take is:
	// queued, written (or being written), or undone by a Free before it
	// was written (see recorder).
	written atomic.Int32
}

// The states of a take (Slot.written).
const (
	takeNone     int32 = iota // not a take: asked, or a FreeCall's
	takeQueued                // queued, not written yet
	takeWriting               // in the pipeline on its way to Redis
	takeWritten               // written (or failed to be)
	takeCanceled              // freed before it was written: neither is
)

// Enforcer applies limits shared by every process that uses the same
// Redis and prefix: the dispatchers' admission limits and the workers'
// execution rates. It is safe for concurrent use.
type Enforcer struct {
	rdb     redis.UniversalClient
	batch   *batcher  // rdb, for the per-call scripts: concurrent calls share round trips
	records *recorder // slots taken without asking, and freed
	prefix  string
	rates   *redis_rate.Limiter
	leases  sync.Map     // leaseKey -> *rateLease
	swept   atomic.Int64 // when idle leases were last forgotten (Unix ns; see sweepLeases)
}

// NewEnforcer returns an enforcer over rdb whose keys start with prefix
// (the registry's, "windlass:" by default).
func NewEnforcer(rdb redis.UniversalClient, prefix string) *Enforcer {
	b := newBatcher(rdb)
	e := &Enforcer{rdb: rdb, batch: b, prefix: prefix, rates: redis_rate.NewLimiter(b)}
	e.records = newRecorder(e)
	return e
}

// The Redis keys, all of one tool in one hash slot ({tool}): see the
// package doc, "Redis keys". redis_rate adds "rate:" before its keys.
func (e *Enforcer) keySlots(tool, key string) string {
	return e.prefix + "limits:{" + tool + "}:in_flight:" + key
}
func (e *Enforcer) toolSlots(tool string) string { return e.prefix + "limits:{" + tool + "}:in_flight" }
func (e *Enforcer) keyRate(tool, key string) string {
	return e.prefix + "limits:{" + tool + "}:rate:" + key
}
func (e *Enforcer) execRate(tool string) string { return e.prefix + "limits:{" + tool + "}:exec" }

// toolMember is a call's member in its tool's set: its key, a space (no
// key has one) and its id, so the tool's use can be told by key.
func toolMember(key, callID string) string { return key + " " + callID }

// admitScript takes a slot for a call under its key's cap and its tool's
// cap, or says which is full. Each set holds the calls in flight, scored
// by when their slot lapses even if nobody releases it. The common case
// is two adds, two counts and two expiries: lapsed slots are dropped only
// when a set seems full, and a call whose id holds its slot already (a
// resubmit) is found by its add, admitted again without a second slot.
//
// KEYS: the key's set, the tool's set. ARGV: now and lapse (ms), the
// call id, the tool's member, the key's cap, the tool's cap (0: none).
// Returns the outcome — 0 (taken now), 1 (held
// already), 2 (the key's cap is full), 3 (the tool's cap is full) — and
// then how many calls hold a slot in each set.
var admitScript = redis.NewScript(`
local now, lapse = tonumber(ARGV[1]), tonumber(ARGV[2])
local keyCap, toolCap = tonumber(ARGV[5]), tonumber(ARGV[6])
local function over(set, cap)
  if cap <= 0 or redis.call('ZCARD', set) <= cap then return false end
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  return redis.call('ZCARD', set) > cap
end
local function expire(set)
  if redis.call('PEXPIREAT', set, lapse, 'GT') == 0 and redis.call('PTTL', set) == -1 then
    redis.call('PEXPIREAT', set, lapse)
  end
end
local function counts(outcome)
  return {outcome, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}
end
if redis.call('ZADD', KEYS[1], 'NX', lapse, ARGV[3]) == 0 then return counts(1) end
if over(KEYS[1], keyCap) then
  redis.call('ZREM', KEYS[1], ARGV[3])
  return counts(2)
end
redis.call('ZADD', KEYS[2], lapse, ARGV[4])
if over(KEYS[2], toolCap) then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[1], ARGV[3])
  return counts(3)
end
expire(KEYS[1])
expire(KEYS[2])
return counts(0)
`)

// Admit decides whether key may publish callID to tool now, under l and
// the tool's cap toolMax (NoLimit: none). An admitted call holds a slot
// until [Enforcer.Free], or until lapse at the latest (a dispatcher
// that died holding it). An error means Redis could not be asked; the
// caller decides what that means (see the package doc, "When Redis is
// unreachable").
//
// The slots this enforcer took without asking and has not written yet
// (see Take) are written first, so that the caps count them: a cap holds
// exactly for the calls of one dispatcher, however it admitted them.
func (e *Enforcer) Admit(ctx context.Context, tool, key, callID string, lapse time.Time, l Limit, toolMax int) (Decision, error) {
	var dec Decision
	if l.MaxInFlight > 0 || toolMax > 0 {
		if err := e.records.takes.flush(ctx); err != nil {
			return Decision{}, fmt.Errorf("limits: admit a call of %q for key %q: write the slots taken before: %w", tool, key, err)
		}
		var err error
		dec, err = decide(e.admitOnce(ctx, tool, key, callID, e.admitArgs(key, callID, lapse, l.MaxInFlight, toolMax)))
		if err != nil {
			return Decision{}, fmt.Errorf("limits: admit a call of %q for key %q: %w", tool, key, err)
		}
		if dec.Held || !dec.Allowed {
			return dec, nil // held: not decided here (see Decision.Held)
		}
		dec.Slot = &Slot{tool: tool, key: key, callID: callID}
	}
	if !l.Rate.IsZero() {
		charged, err := e.Charge(ctx, tool, key, l.Rate)
		if err != nil || !charged.Allowed {
			e.Free(dec.Slot)
			charged.KeyInFlight, charged.ToolInFlight = dec.KeyInFlight, dec.ToolInFlight
			return charged, err
		}
	}
	dec.Allowed = true
	return dec, nil
}

// admitOnce runs admitScript for callID through the batcher. A caller
// that leaves (ctx ends: a client gone, the dispatcher's bound on the ask)
// while the script is on its way to Redis is told it failed, and holds no
// slot: one the script took anyway is freed once it has (as a free from
// Free, after the script), or it would be held, by nobody, until it
// lapses — a key's cap filled with abandoned requests.
func (e *Enforcer) admitOnce(ctx context.Context, tool, key, callID string, args []any) *redis.Cmd {
	keys := e.admitKeys(tool, key)
	late := func(c *redis.Cmd) {
		if v, err := c.Int64Slice(); err == nil && len(v) == 3 && v[0] == 0 {
			e.Free(&Slot{tool: tool, key: key, callID: callID})
		}
	}
	cmd := doUndo(ctx, e.batch, func(p redis.Pipeliner) *redis.Cmd { return admitScript.EvalSha(ctx, p, keys, args...) }, late)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = doUndo(ctx, e.batch, func(p redis.Pipeliner) *redis.Cmd { return admitScript.Eval(ctx, p, keys, args...) }, late)
	}
	return cmd
}

// Charge takes one call of key to tool from rate r, shared by every
// dispatcher: allowed, or refused with ReasonRate and when to try again.
// A refused call is not charged.
//
// A rate whose lease would hold two tokens or more (a quarter of its
// burst and 20 ms of it, see leaseSize) is charged in leases (see
// rateLease): tokens taken from Redis a few at a time and handed out by
// this enforcer. Any other is asked on every call it admits. Either way a
// refusal is kept until Redis says the next token comes: a key that floods
// costs Redis an ask a token, not one a call.
func (e *Enforcer) Charge(ctx context.Context, tool, key string, r Rate) (Decision, error) {
	e.sweepLeases(time.Now())
	if size := leaseSize(r); size > 1 {
		return e.charge(ctx, leaseKey{tool, key, r}, size)
	}
	return e.chargeEach(ctx, leaseKey{tool, key, r})
}

// Take records a slot for a call its dispatcher admitted without asking
// (it knew the counts were far from the caps), whatever the caps say
// now: the slot is queued to Redis before Take returns, ahead of any
// Free of it, and then runs with the counts it found (nil error), or why
// it could not be recorded (the slot then is not held). then runs on the
// goroutine that writes the records: it must not wait. ok is false when
// too many records wait already: the call is not admitted this way.
//
// The slot waits up to 25 ms for its Free, which then undoes it (see
// recorder): only its taker may free it. A slot another process may free
// ([Enforcer.FreeCall]: a call submitted without waiting for its answer)
// is not taken this way but asked for ([Enforcer.Admit]), which writes it
// before the call goes out: a free that reached Redis before a queued
// take would leave the slot held until it lapsed.
func (e *Enforcer) Take(tool, key, callID string, lapse time.Time, then func(Taken)) (slot *Slot, ok bool) {
	slot = &Slot{tool: tool, key: key, callID: callID}
	if !e.records.take(record{slot: slot, lapse: lapse, then: then}) {
		return nil, false
	}
	return slot, true
}

// Free frees the slot of a call that ended, after every slot taken
// before, without waiting: a slot that cannot be freed (Redis
// unreachable, too many records waiting) lapses on its own. A slot Take
// recorded whose take is still waiting to be written (see recordHold) is
// undone instead: neither its take nor its free goes to Redis, and undone
// is true (its take's then runs later with Taken.Undone).
func (e *Enforcer) Free(s *Slot) (undone bool) {
	return s != nil && e.records.free(s)
}

// FreeCall frees the slot of call callID of tool under key, if it holds
// one, like Free, for a process that did not take it: the one that stored
// the call's answer (see the package doc, "A call's slot"). Freeing a
// slot nobody holds does nothing.
func (e *Enforcer) FreeCall(tool, key, callID string) {
	if key == "" {
		key = DefaultKey
	}
	e.Free(&Slot{tool: tool, key: key, callID: callID})
}

// Wait waits until the slots taken and freed so far are written (or
// failed to be).
func (e *Enforcer) Wait() { e.records.wait() }

// Taken is what Take found: the counts after the call took its slot,
// or, when Undone, the counts of the batch its take would have been
// written in (Free undid it before: the slot was never counted).
type Taken struct {
	KeyInFlight, ToolInFlight int
	Undone                    bool
	Err                       error
}

func (e *Enforcer) admitKeys(tool, key string) []string {
	return []string{e.keySlots(tool, key), e.toolSlots(tool)}
}

func (e *Enforcer) admitArgs(key, callID string, lapse time.Time, keyCap, toolCap int) []any {
	return []any{time.Now().UnixMilli(), lapse.UnixMilli(), callID, toolMember(key, callID), max(keyCap, 0), max(toolCap, 0)}
}

// decide reads admitScript's answer.
func decide(cmd *redis.Cmd) (Decision, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	if len(v) != 3 {
		return Decision{}, fmt.Errorf("limits: the admission script answered %v", v)
	}
	dec := Decision{KeyInFlight: int(v[1]), ToolInFlight: int(v[2])}
	switch v[0] {
	case 0:
		dec.Allowed = true
	case 1:
		dec.Held = true
	case 2:
		dec.Reason, dec.RetryAfter = ReasonInFlight, SlotRetryAfter
	default:
		dec.Reason, dec.RetryAfter = ReasonToolQueue, SlotRetryAfter
	}
	return dec, nil
}

// Start takes a turn to start a call of tool under its execution rate r,
// shared by every worker of the tool. It returns 0 when the call may
// start now, else how long to wait before asking again.
func (e *Enforcer) Start(ctx context.Context, tool string, r Rate) (wait time.Duration, err error) {
	res, err := e.rates.Allow(ctx, e.execRate(tool), redisLimit(r))
	if err != nil {
		return 0, fmt.Errorf("limits: execution rate of %q: %w", tool, err)
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Millisecond), nil
}

// Use is how many calls of tool are in flight now, by key, as the caps
// count them (the calls that hold a slot).
func (e *Enforcer) Use(ctx context.Context, tool string) (map[string]int, error) {
	// A slot whose lapse is now has lapsed, as the scripts drop it
	// (ZREMRANGEBYSCORE -inf now): only later lapses count.
	members, err := e.rdb.ZRangeByScore(ctx, e.toolSlots(tool), &redis.ZRangeBy{Min: fmt.Sprint("(", time.Now().UnixMilli()), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("limits: use of %q: %w", tool, err)
	}
	use := map[string]int{}
	for _, m := range members {
		key, _, _ := strings.Cut(m, " ")
		use[key]++
	}
	return use, nil
}

// redisLimit is r as redis_rate takes it.
func redisLimit(r Rate) redis_rate.Limit {
	return redis_rate.Limit{Rate: r.Events, Period: r.Per, Burst: r.burst()}
}
