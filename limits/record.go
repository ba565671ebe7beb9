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
// (BENCHMARKS.md, "Limits").
//
// Takes wait up to recordHold before they are written, and a Free that
// comes meanwhile undoes its take (see Enforcer.Free): a call that ends
// within the hold — a fast tool's round trip — costs Redis nothing but its
// share of one count a batch. The price: other dispatchers see a slot up
// to recordHold late, within the quarter of a cap each may admit without
// asking (see the package doc, and Enforcer.Admit for this dispatcher's
// own takes still waiting).
//
// Frees do not wait: a caller's next call under a cap of one must find
// its last call's slot free. A call's free never overtakes its take: a
// take still queued is undone instead, and the free of a take being
// written goes right behind it, in the takes' queue. Nor do the takes of
// slots another process may free (a call submitted without waiting for
// its answer, freed by whoever stores it): another's free of a slot not
// written yet would come first, and the slot would be held until it
// lapses.
//
// No goroutine runs while nothing is queued (see drainer).
type recorder struct {
	e     *Enforcer
	takes drainer[record] // takes, and the frees of takes being written
	frees drainer[record] // every other free
}

// newRecorder returns e's recorder.
func newRecorder(e *Enforcer) *recorder {
	r := &recorder{e: e}
	r.takes = drainer[record]{write: r.write, batch: maxRecordBatch, limit: maxRecords, hold: recordHold}
	r.frees = drainer[record]{write: r.write, batch: maxRecordBatch, limit: maxRecords}
	return r
}

// record is one slot to take (lapse set) or to free.
type record struct {
	slot  *Slot
	lapse time.Time
	then  func(Taken)
}

// maxRecords bounds the records queued in each queue: past it a take is
// refused (the caller asks instead) and a free dropped (the slot lapses).
const maxRecords = 1 << 16

// maxRecordBatch bounds the records written in one pipeline.
const maxRecordBatch = 1024

// recordHold is how long a batch of takes waits for the frees that undo
// them. At 64 calls in flight a no-op call's round trip is 4–12 ms on the
// benchmark's machine (BENCHMARKS.md), so most such calls end within it;
// it is far below freshFor, the second a dispatcher trusts a count for.
const recordHold = 25 * time.Millisecond

// take queues a take, held for the frees that undo it (recordHold);
// false when the queue is full.
func (r *recorder) take(rec record) bool {
	rec.slot.written.Store(takeQueued)
	return r.takes.add(rec, false)
}

// free queues the free of s, or undoes its take (undone) if that is
// still queued.
func (r *recorder) free(s *Slot) (undone bool) {
	switch {
	case s.written.CompareAndSwap(takeQueued, takeCanceled):
		return true
	case s.written.Load() == takeWriting:
		r.takes.add(record{slot: s}, true) // behind its take's batch, not held
	default:
		r.frees.add(record{slot: s}, false)
	}
	return false
}

// wait waits until both queues are written.
func (r *recorder) wait() {
	r.takes.wait()
	r.frees.wait()
}

// takeGroup is the takes of one tool × key in a batch.
type takeGroup struct {
	tool, key string
	latest    int64 // the latest lapse (ms) of its takes still to write
	args      []any // lapse (ms), id, tool member; for each take to write
	thens     []func(Taken)
	undone    []bool           // for each then: its take was undone
	cmd       *redis.Cmd       // takeScript: the takes, then the counts
	counts    [2]*redis.IntCmd // when every take was undone: the counts alone
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
	var writing []*Slot // the takes this batch writes
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
		undone := !s.written.CompareAndSwap(takeQueued, takeWriting)
		g.thens = append(g.thens, rec.then)
		g.undone = append(g.undone, undone)
		if undone {
			continue // freed before it was written: only counted
		}
		ms := rec.lapse.UnixMilli()
		g.latest = max(g.latest, ms)
		g.args = append(g.args, ms, s.callID, toolMember(s.key, s.callID))
		writing = append(writing, s)
	}
	send := func() (forgotten bool) {
		pipe := e.rdb.Pipeline()
		for _, g := range groups {
			keys := e.admitKeys(g.tool, g.key)
			if len(g.args) == 0 {
				g.counts = [2]*redis.IntCmd{pipe.ZCard(ctx, keys[0]), pipe.ZCard(ctx, keys[1])}
				continue
			}
			g.cmd = takeScript.EvalSha(ctx, pipe, keys, append([]any{g.latest}, g.args...)...)
		}
		for _, set := range freeOrder {
			pipe.ZRem(ctx, set, frees[set]...)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own result or error
		for _, g := range groups {
			forgotten = forgotten || (g.cmd != nil && redis.HasErrorPrefix(g.cmd.Err(), "NOSCRIPT"))
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
	for _, s := range writing {
		s.written.Store(takeWritten) // its free no longer waits behind it
	}
	for _, g := range groups {
		t := g.taken()
		for i, then := range g.thens {
			if then != nil {
				t.Undone = g.undone[i]
				then(t)
			}
		}
	}
}

// taken is what g's commands found: both counts, or why not.
func (g *takeGroup) taken() Taken {
	if g.cmd == nil {
		key, err := g.counts[0].Result()
		tool, err2 := g.counts[1].Result()
		if err == nil {
			err = err2
		}
		return Taken{KeyInFlight: int(key), ToolInFlight: int(tool), Err: err}
	}
	counts, err := g.cmd.Int64Slice()
	t := Taken{Err: err}
	if err == nil && len(counts) == 2 {
		t.KeyInFlight, t.ToolInFlight = int(counts[0]), int(counts[1])
	}
	return t
}
