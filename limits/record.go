package limits

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// recorder writes to Redis the slots taken without asking (Take) and the
// slots freed (Free), in batches: each batch is one pipeline holding one
// script per tool × key for all its takes, and one ZREM per set for all
// its frees, takes first. A script and a command per call each cost the
// Redis server, on the same two cores as the fleet in the benchmark,
// most of what admission still cost once it stopped waiting for Redis
// (BENCHMARKS.md, "Limits"). Records are written in the order they came:
// a call's take is queued before the call is published, so before its
// result can free it.
//
// No goroutine runs while nothing is queued (see drainer).
type recorder struct {
	e       *Enforcer
	pending drainer[record]
}

// record is one slot to take (lapse set) or to free.
type record struct {
	slot  *Slot
	lapse time.Time
	then  func(Taken)
}

// maxRecords bounds the records queued: past it a take is refused (the
// caller asks instead) and a free dropped (the slot lapses).
const maxRecords = 1 << 16

// maxRecordBatch bounds the records written in one pipeline.
const maxRecordBatch = 1024

// add queues rec; false when the queue is full.
func (r *recorder) add(rec record) bool { return r.pending.add(rec) }

// takeGroup is the takes of one tool × key in a batch.
type takeGroup struct {
	tool, key string
	args      []any // lapse (ms), id, tool member; for each take
	thens     []func(Taken)
	cmd       *redis.Cmd
}

// takeScript records slots taken without asking, whatever the caps: for
// each call, its id in the key's set and its member in the tool's set,
// scored by its lapse; then both sets' expiry is pushed to the latest
// lapse. KEYS: the key's set, the tool's set. ARGV: the latest lapse,
// then lapse, id and member for each call. Returns both sets' counts.
var takeScript = redis.NewScript(`
for i = 2, #ARGV, 3 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i+1])
  redis.call('ZADD', KEYS[2], ARGV[i], ARGV[i+2])
end
for _, set in ipairs(KEYS) do
  if redis.call('PEXPIREAT', set, ARGV[1], 'GT') == 0 and redis.call('PTTL', set) == -1 then
    redis.call('PEXPIREAT', set, ARGV[1])
  end
end
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}
`)

// write sends one batch and hands each take its counts.
func (r *recorder) write(batch []record) {
	e := r.e
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	var groups []*takeGroup
	byKey := map[[2]string]*takeGroup{}
	frees := map[string][]any{} // set -> members
	var freeOrder []string
	free := func(set string, member string) {
		if _, ok := frees[set]; !ok {
			freeOrder = append(freeOrder, set)
		}
		frees[set] = append(frees[set], member)
	}
	latest := map[*takeGroup]int64{}
	for _, rec := range batch {
		s := rec.slot
		if rec.lapse.IsZero() {
			free(e.keySlots(s.tool, s.key), s.callID)
			free(e.toolSlots(s.tool), toolMember(s.key, s.callID))
			continue
		}
		g := byKey[[2]string{s.tool, s.key}]
		if g == nil {
			g = &takeGroup{tool: s.tool, key: s.key}
			byKey[[2]string{s.tool, s.key}] = g
			groups = append(groups, g)
		}
		ms := rec.lapse.UnixMilli()
		latest[g] = max(latest[g], ms)
		g.args = append(g.args, ms, s.callID, toolMember(s.key, s.callID))
		g.thens = append(g.thens, rec.then)
	}
	send := func() (forgotten bool) {
		pipe := e.rdb.Pipeline()
		for _, g := range groups {
			g.cmd = takeScript.EvalSha(ctx, pipe, e.admitKeys(g.tool, g.key), append([]any{latest[g]}, g.args...)...)
		}
		for _, set := range freeOrder {
			pipe.ZRem(ctx, set, frees[set]...)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own result or error
		for _, g := range groups {
			forgotten = forgotten || redis.HasErrorPrefix(g.cmd.Err(), "NOSCRIPT")
		}
		return forgotten
	}
	if send() {
		// Redis does not know the script (its first use, or a restart):
		// load it and send the batch again, in order — takes and frees
		// are both idempotent.
		if err := takeScript.Load(ctx, e.rdb).Err(); err == nil {
			send()
		}
	}
	for _, g := range groups {
		counts, err := g.cmd.Int64Slice()
		t := Taken{Err: err}
		if err == nil && len(counts) == 2 {
			t.KeyInFlight, t.ToolInFlight = int(counts[0]), int(counts[1])
		}
		for _, then := range g.thens {
			if then != nil {
				then(t)
			}
		}
	}
}
