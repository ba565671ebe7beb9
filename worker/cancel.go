package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
)

// cancellations is what the worker knows of canceled calls: it follows the
// cancels stream from its start, so a call canceled while queued is
// answered canceled when it is pulled later, and a running call's context
// is canceled the moment its cancellation arrives.
type cancellations struct {
	mu       sync.Mutex
	canceled map[string]windlass.Cancellation // by call token
	running  map[string]context.CancelCauseFunc

	// How far the follower has come: the stream sequence of the last
	// record it applied, and when (this process's monotonic clock, as an
	// offset from epoch) it last knew that every record stored by then was
	// applied (see caughtUpRecently).
	applied    atomic.Uint64
	caughtUpAt atomic.Int64
	epoch      time.Time
	keep       atomic.Int64  // how long the stream keeps a cancellation (its max age; 0: for ever)
	probe      chan struct{} // asks the follower's goroutine for a probe
	landed     chan struct{} // closed when the probe asked for next has landed; nil: none asked for (under mu)

	// delivered, when set (by a test), runs first for each record
	// delivered, before it is applied.
	delivered func(subject string)
}

// kept is how long the cancels stream keeps a cancellation (0: for ever):
// a call that waited longer may have been canceled with no record left to
// say so.
func (c *cancellations) kept() time.Duration { return time.Duration(c.keep.Load()) }

func newCancellations() *cancellations {
	return &cancellations{canceled: map[string]windlass.Cancellation{}, running: map[string]context.CancelCauseFunc{}, probe: make(chan struct{}, 1),
		epoch: time.Now()}
}

// caughtUpRecently reports whether the follower knew, at most within ago,
// that every cancellation stored by then was applied: a look-up of the
// cancels stream now could only add one stored in those last moments, the
// same window a call pulled within cancelCheckAfter of its publish is
// given. (A cancellation that matters is stored after its call, so knowing
// the follower had caught up past the call's publish would not do.)
func (c *cancellations) caughtUpRecently(ago time.Duration) bool {
	at := c.caughtUpAt.Load()
	return at > 0 && time.Since(c.epoch)-time.Duration(at) <= ago
}

// markCaughtUp records that every cancellation stored by t (this
// process's clock) is applied.
func (c *cancellations) markCaughtUp(t time.Time) {
	for n := int64(t.Sub(c.epoch)); ; {
		cur := c.caughtUpAt.Load()
		if cur >= n || c.caughtUpAt.CompareAndSwap(cur, n) {
			return
		}
	}
}

// probeSoon asks the follower to check, once, whether it has caught up
// with the stream (see follow), and returns a channel closed when that
// check has landed: one asked after this call, whether it proved the
// follower caught up or not. The calls that ask while one is due share
// it.
func (c *cancellations) probeSoon() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.landed == nil {
		c.landed = make(chan struct{})
		c.probe <- struct{}{} // never blocks: one is asked for per landed, and the follower takes it before making the next
	}
	return c.landed
}

// probing takes the channel of the probe asked for, for the probe about
// to be made: later asks wait for the next one.
func (c *cancellations) probing() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	landed := c.landed
	c.landed = nil
	return landed
}

// lookedUp reports whether token's call is canceled, as far as the
// follower has applied.
func (c *cancellations) lookedUp(token string) (windlass.Cancellation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.canceled[token]
	return rec, ok
}

// start registers a running call and reports whether it is already
// canceled. Registering first, then checking, leaves no gap in which a
// cancellation could arrive unseen.
func (c *cancellations) start(token string, cancel context.CancelCauseFunc) (windlass.Cancellation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[token] = cancel
	rec, ok := c.canceled[token]
	return rec, ok
}

// finish forgets a running call.
func (c *cancellations) finish(token string) {
	c.mu.Lock()
	delete(c.running, token)
	c.mu.Unlock()
}

// add records a cancellation and cancels the call if it runs here.
func (c *cancellations) add(token string, rec windlass.Cancellation) {
	c.mu.Lock()
	c.canceled[token] = rec
	cancel := c.running[token]
	c.mu.Unlock()
	if cancel != nil {
		cancel(windlass.CancelCause(rec.Reason))
	}
}

// prune forgets cancellations older than the stream keeps them.
func (c *cancellations) prune(before time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for token, rec := range c.canceled {
		if rec.At.Before(before) {
			delete(c.canceled, token)
		}
	}
}

// checkCaughtUp asks the stream how far it goes: when the follower has
// applied its last record, every cancellation stored before the question
// was asked is applied. It is the only way the follower learns it once it
// has started: a record's pending count says what was left when the
// server delivered it, and this process does not know when that was — a
// record handled later than it was delivered (the follower behind, its
// process paused) would have it claim records stored in between, which
// wait unapplied behind it.
func (c *cancellations) checkCaughtUp(ctx context.Context, stream jetstream.Stream) {
	ctx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	asked := time.Now()
	info, err := stream.Info(ctx)
	if err == nil && c.applied.Load() >= info.State.LastSeq {
		c.markCaughtUp(asked)
	}
}

// follow consumes the cancels stream with an ordered consumer (which
// survives reconnects and server restarts on its own) until ctx ends. It
// returns once the records that existed at its start are loaded, or after
// a bound, so the worker pulls no call before it knows what was canceled.
func (c *cancellations) follow(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (stop func(), err error) {
	stream, err := js.Stream(ctx, layout.CancelsStream)
	if err != nil {
		return nil, fmt.Errorf("worker: cancels stream: %w", err)
	}
	asked := time.Now()
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: cancels stream: %w", err)
	}
	c.keep.Store(int64(info.Config.MaxAge))
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{layout.CancelSubjects}})
	if err != nil {
		return nil, fmt.Errorf("worker: follow cancellations: %w", err)
	}
	caughtUp := make(chan struct{})
	var once sync.Once
	lastAtStart := info.State.LastSeq
	if lastAtStart == 0 || info.State.Msgs == 0 {
		c.markCaughtUp(asked)
		once.Do(func() { close(caughtUp) })
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if c.delivered != nil {
			c.delivered(m.Subject())
		}
		var rec windlass.Cancellation
		if err := json.Unmarshal(m.Data(), &rec); err != nil || rec.CallID == "" {
			log.Warn("worker: unreadable cancellation ignored", "subject", m.Subject(), "error", err)
		} else {
			token := strings.TrimPrefix(m.Subject(), strings.TrimSuffix(layout.CancelSubjects, "*"))
			c.add(token, rec)
		}
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		c.applied.Store(meta.Sequence.Stream)
		if meta.Sequence.Stream >= lastAtStart {
			once.Do(func() {
				c.markCaughtUp(asked) // every record stored when the stream was asked is applied
				close(caughtUp)
			})
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		log.Debug("worker: following cancellations", "error", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("worker: follow cancellations: %w", err)
	}
	select {
	case <-caughtUp:
	case <-time.After(10 * time.Second):
		log.Warn("worker: cancellations not loaded after 10s; starting anyway")
	case <-ctx.Done():
	}
	pruned := make(chan struct{})
	prunerCtx, stopPruner := context.WithCancel(ctx)
	go func() {
		defer close(pruned)
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-prunerCtx.Done():
				return
			case <-t.C:
				if keep := c.kept(); keep > 0 {
					c.prune(time.Now().Add(-keep))
				}
			case <-c.probe:
				landed := c.probing()
				c.checkCaughtUp(prunerCtx, stream)
				close(landed)
			}
		}
	}()
	return func() { cc.Stop(); <-cc.Closed(); stopPruner(); <-pruned }, nil
}
