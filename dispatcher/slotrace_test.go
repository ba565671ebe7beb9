package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// delayTake is a go-redis hook on the dispatcher's Redis client that, once
// armed, holds back the record writer's pipelines that take a slot
// (takeScript: EVALSHA with 2 keys and 4 arguments, 9 args in all; the
// admission script, which asks, has 6 arguments) until release is closed: a dispatcher whose record writer is slow
// (a loaded machine, a Redis round trip longer than the call's own), an
// order a real server shows only by chance.
type delayTake struct {
	armed   *atomic.Bool
	release chan struct{}
}

func (h delayTake) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h delayTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h delayTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.armed.Load() && c.Name() == "evalsha" && len(c.Args()) == 9 {
				select {
				case <-h.release:
				case <-time.After(20 * time.Second):
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// seeZRem is a go-redis hook on the worker's Redis client recording the
// members its frees (ZREM) name.
type seeZRem struct{ members *sync.Map }

func (h seeZRem) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h seeZRem) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h seeZRem) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "zrem" {
				for _, m := range c.Args()[2:] {
					h.members.Store(fmt.Sprint(m), true)
				}
			}
		}
		return err
	}
}

// TestDetachedSlotFreedBeforeItsTakeIsWritten: a call submitted without
// waiting for its answer (Submit; a CLI's call --async, which closes its
// dispatcher at once) holds no slot once its worker stored its answer and
// freed it, however slow the dispatcher's record writer. Before, its slot
// could be taken without asking: the take was queued to the writer and
// written after the publish, so the worker's free (ZREM) could come
// first; the take then added the slot, nobody freed it again, and it
// counted against the key's and the tool's max_in_flight until it lapsed
// (the call's deadline and a grace).
func TestDetachedSlotFreedBeforeItsTakeIsWritten(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	members := new(sync.Map)
	wc := f.RedisClient()
	wc.AddHook(seeZRem{members: members})
	wreg, err := registry.New(registry.Config{Client: wc})
	if err != nil {
		t.Fatal(err)
	}
	echo := windlass.MustFunc("echo", func(ctx context.Context, in struct{}) (string, error) { return "ok", nil })
	f.StartWorker(worker.Config{Registry: wreg}, echo)

	dc := f.RedisClient()
	armed := new(atomic.Bool)
	hook := delayTake{armed: armed, release: make(chan struct{})}
	dc.AddHook(hook)
	dreg, err := registry.New(registry.Config{Client: dc, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(t.Context(), dispatcher.Config{Conn: f.Conn(), Registry: dreg,
		Limits: limits.Config{Default: limits.Limit{MaxInFlight: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	var closeOnce sync.Once
	closeD := func() { closeOnce.Do(func() { _ = d.Close() }) }
	var releaseOnce sync.Once
	releaseTake := func() { releaseOnce.Do(func() { close(hook.release) }) }
	t.Cleanup(func() { releaseTake(); closeD() })
	fleettest.WaitCatalog(t, d, "echo")
	other := f.Dispatcher(dispatcher.Config{Limits: limits.Unlimited()})

	// A first call asks Redis, so the dispatcher knows the counts are far
	// from the cap, and takes the next call's slot without asking.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	id0, err := d.Submit(ctx, "echo", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Wait(ctx, id0); err != nil {
		t.Fatal(err)
	}

	armed.Store(true)
	id, err := d.Submit(ctx, "echo", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { closeD(); close(closed) }() // the CLI exits: Close waits for the take to be written
	if _, err := other.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the worker's free of the slot", func() bool {
		_, ok := members.Load(id)
		return ok
	})
	armed.Store(false)
	releaseTake()
	<-closed

	peek := f.RedisClient()
	keySet := registry.DefaultPrefix + "limits:{echo}:in_flight:" + limits.DefaultKey
	if score, err := peek.ZScore(t.Context(), keySet, id).Result(); err == nil {
		lapse := time.UnixMilli(int64(score))
		n, _ := peek.ZCard(t.Context(), keySet).Result()
		t.Fatalf("call %s is answered and its slot freed by the worker, yet %s holds it (%d in flight) until %s (in %s): the take was written after the free",
			id, keySet, n, lapse.Format(time.RFC3339), time.Until(lapse).Round(time.Second))
	} else if !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
}
