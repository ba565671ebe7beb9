package limits

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the Redis commands of concurrent callers together, one
// pipeline per round trip: while one batch is on the wire, the commands
// that arrive queue up and go in the next. A call with a rate, or near a
// cap, asks Redis before it is published (and a worker asks before a
// rated tool starts); when every call asked, with 64 calls in flight one
// round trip each cost a fifth of the fleet's throughput on a 2-core
// machine (BENCHMARKS.md, "Limits"): the syscalls and the wait for one of
// the pool's connections, not Redis's work. go-redis has no automatic
// pipelining, and redis_rate calls its script synchronously, so the
// batcher stands in for the client: it implements redis.Scripter (and
// what redis_rate asks of a client), each call waiting for its batch.
//
// No goroutine runs while nothing is queued: the first caller to find the
// batcher idle starts one, which drains the queue and ends.
type batcher struct {
	rdb     redis.UniversalClient
	pending drainer[*batched]
}

// newBatcher returns a batcher over rdb.
func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{rdb: rdb}
	b.pending = drainer[*batched]{write: b.send, batch: maxBatch}
	return b
}

// batched is one command waiting for its batch.
type batched struct {
	build func(redis.Pipeliner) redis.Cmder
	cmd   redis.Cmder
	done  chan struct{}
	state atomic.Int32 // see the states below
	// late, if set, runs with the answer of a command whose caller left
	// (its ctx ended) while it was on its way to Redis: what it did there
	// must be undone, or it stands with nobody to know (a slot taken).
	late func(redis.Cmder)
}

// The states of a batched command: queued, then sending and answered —
// or, when its caller leaves, abandoned (still queued: never sent) or
// left (sent: late gets its answer).
const (
	batchQueued int32 = iota
	batchSending
	batchAnswered
	batchAbandoned
	batchLeft
)

// maxBatch bounds the commands sent in one pipeline.
const maxBatch = 512

// batchTimeout bounds one batch's round trip.
const batchTimeout = 5 * time.Second

// do queues build and waits for its batch, or for ctx; it returns the
// command build made, executed, or one failed with ctx's error. A caller
// that leaves before its command is sent leaves nothing: it is not sent.
func do[C redis.Cmder](ctx context.Context, b *batcher, build func(redis.Pipeliner) C) C {
	return doUndo(ctx, b, build, nil)
}

// doUndo is do, with late to run on the answer of a command its caller
// left while it was on its way (see batched.late).
func doUndo[C redis.Cmder](ctx context.Context, b *batcher, build func(redis.Pipeliner) C, late func(C)) C {
	failed := func(err error) C {
		c := build(b.rdb.Pipeline()) // a command of the right kind, never sent
		c.SetErr(err)
		return c
	}
	if err := ctx.Err(); err != nil {
		return failed(err)
	}
	r := &batched{build: func(p redis.Pipeliner) redis.Cmder { return build(p) }, done: make(chan struct{})}
	if late != nil {
		r.late = func(c redis.Cmder) { late(c.(C)) }
	}
	b.enqueue(r)
	select {
	case <-r.done:
		return r.cmd.(C)
	case <-ctx.Done():
		if r.state.CompareAndSwap(batchQueued, batchAbandoned) || r.state.CompareAndSwap(batchSending, batchLeft) {
			return failed(ctx.Err())
		}
		<-r.done // answered as ctx ended
		return r.cmd.(C)
	}
}

// enqueue queues r and returns at once: its command is sent after every
// command queued before it, and r.done is closed once it has its answer.
func (b *batcher) enqueue(r *batched) { b.pending.add(r, false) }

// send sends one batch in one pipeline: the commands whose callers still
// wait, and hands each its answer (or its late undo, its caller gone).
func (b *batcher) send(batch []*batched) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	pipe := b.rdb.Pipeline()
	sending := batch[:0:0]
	for _, r := range batch {
		if r.state.CompareAndSwap(batchQueued, batchSending) {
			r.cmd = r.build(pipe)
			sending = append(sending, r)
		}
	}
	if len(sending) > 0 {
		_, _ = pipe.Exec(ctx) // each command holds its own result or error
	}
	for _, r := range sending {
		if !r.state.CompareAndSwap(batchSending, batchAnswered) && r.late != nil {
			r.late(r.cmd) // its caller left
		}
		close(r.done)
	}
}

// The client methods scripts need (redis.Scripter, and redis_rate's
// client), each sent in a batch.

func (b *batcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

func (b *batcher) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

func (b *batcher) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.Cmd { return p.EvalRO(ctx, script, keys, args...) })
}

func (b *batcher) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.Cmd { return p.EvalShaRO(ctx, sha1, keys, args...) })
}

func (b *batcher) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.BoolSliceCmd { return p.ScriptExists(ctx, hashes...) })
}

func (b *batcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.StringCmd { return p.ScriptLoad(ctx, script) })
}

func (b *batcher) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return do(ctx, b, func(p redis.Pipeliner) *redis.IntCmd { return p.Del(ctx, keys...) })
}
