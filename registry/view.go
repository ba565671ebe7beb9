package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// View is an in-memory copy of the registry that follows changes: a change
// announcement triggers a resync at once, and a timer resyncs every
// Config.ResyncInterval. Reads never touch Redis. Safe for concurrent use.
type View struct {
	reg *Registry

	mu       sync.RWMutex
	tools    map[string]ToolInfo
	names    []string // sorted
	lastSync time.Time
	lastErr  error
	changed  chan struct{}
	// carried are tools the view still offers though Redis no longer
	// lists them, each until the time it is dropped (see sync).
	carried map[string]time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// Watch subscribes to change announcements, reads every tool once (so the
// view is complete when Watch returns) and keeps the view current until
// [View.Close]. ctx bounds only the first read.
func (r *Registry) Watch(ctx context.Context) (*View, error) {
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sub := r.cfg.Client.Subscribe(bg, r.channel())
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		cancel()
		_ = sub.Close()
		return nil, fmt.Errorf("registry: subscribe to %s: %w", r.channel(), err)
	}
	v := &View{reg: r, tools: map[string]ToolInfo{}, carried: map[string]time.Time{}, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	if err := v.sync(ctx); err != nil {
		cancel()
		_ = sub.Close()
		return nil, err
	}
	go v.run(bg, sub)
	return v, nil
}

func (v *View) run(ctx context.Context, sub *redis.PubSub) {
	defer close(v.done)
	defer sub.Close()
	announcements := sub.Channel()
	ticker := time.NewTicker(v.reg.cfg.ResyncInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-announcements:
			if !ok {
				announcements = nil // closed: rely on the timer
				continue
			}
			// Coalesce a burst of announcements into one resync.
			for drained := false; !drained; {
				select {
				case <-announcements:
				default:
					drained = true
				}
			}
		case <-ticker.C:
		}
		syncCtx, cancel := context.WithTimeout(ctx, v.reg.cfg.ResyncInterval*2)
		if err := v.sync(syncCtx); err != nil && ctx.Err() == nil {
			v.reg.cfg.Logger.WarnContext(ctx, "registry: view resync failed; serving the last view", "error", err, "staleness", v.Staleness())
		}
		cancel()
	}
}

// sync rereads every tool and swaps the view.
func (v *View) sync(ctx context.Context) error {
	infos, err := v.reg.List(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.lastErr = err
		return err
	}
	tools := make(map[string]ToolInfo, len(infos))
	names := make([]string, 0, len(infos))
	for _, t := range infos {
		tools[t.Spec.Name] = t
		names = append(names, t.Spec.Name)
		delete(v.carried, t.Spec.Name)
	}
	now := time.Now()
	if carried := v.carryLocked(tools, now); len(carried) > 0 {
		names = append(names, carried...)
		slices.Sort(names)
	}
	differs := !sameView(v.tools, tools, v.asOfLocked(), now)
	v.tools, v.names, v.lastSync, v.lastErr = tools, names, time.Now(), nil
	if differs {
		close(v.changed)
		v.changed = make(chan struct{})
	}
	return nil
}

// carryLocked adds to tools, and returns the names of, the tools of the
// current view that Redis no longer lists. The registry never deletes a
// tool, so Redis lost it: restarted without persistence, or flushed. Its
// workers re-advertise at their next heartbeat; until then the view keeps
// routing to them: a worker live in the last view stays live for one TTL
// from when the loss was first seen, then the tool is dropped unless it was
// advertised again. Liveness is advice for routing only: a call routed to a
// worker that is really gone waits in its queue, bounded by its deadline.
func (v *View) carryLocked(tools map[string]ToolInfo, now time.Time) []string {
	prevAsOf := v.asOfLocked()
	var names []string
	for name, old := range v.tools {
		if _, listed := tools[name]; listed {
			continue
		}
		until, seen := v.carried[name]
		if !seen {
			if !old.HasLiveWorker(prevAsOf) {
				continue // nobody served it: nothing to keep routing to
			}
			until = now.Add(v.reg.cfg.TTL)
			v.carried[name] = until
			workers := make([]WorkerLease, 0, len(old.Workers))
			for _, w := range old.Workers {
				if w.Expires.After(prevAsOf) {
					workers = append(workers, WorkerLease{ID: w.ID, Expires: until})
				}
			}
			old.Workers = workers
			v.reg.cfg.Logger.Warn("registry: a tool vanished from Redis (restarted or flushed?); routing by the last view until its workers re-advertise", "tool", name, "until", until)
		}
		if !now.Before(until) {
			delete(v.carried, name)
			continue
		}
		tools[name] = old
		names = append(names, name)
	}
	return names
}

// sameView reports whether two views offer the same tools, specs, rates
// and live workers.
func sameView(a, b map[string]ToolInfo, atA, atB time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for name, ta := range a {
		tb, ok := b[name]
		if !ok || ta.Hash != tb.Hash || ta.Rate != tb.Rate || !slices.Equal(ta.LiveWorkers(atA), tb.LiveWorkers(atB)) {
			return false
		}
	}
	return true
}

// asOfLocked is the clock liveness is judged by: now while the view is
// fresh, the last successful sync once a sync has failed, so an outage of
// Redis does not make every worker look dead.
func (v *View) asOfLocked() time.Time {
	if v.lastErr != nil {
		return v.lastSync
	}
	return time.Now()
}

// Tool returns the named tool and the clock to judge its leases by (see
// [ToolInfo.HasLiveWorker]).
func (v *View) Tool(name string) (info ToolInfo, asOf time.Time, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	info, ok = v.tools[name]
	return info, v.asOfLocked(), ok
}

// Tools returns every tool in the view, sorted by name, and the clock to
// judge their leases by.
func (v *View) Tools() (tools []ToolInfo, asOf time.Time) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	tools = make([]ToolInfo, 0, len(v.names))
	for _, n := range v.names {
		tools = append(tools, v.tools[n])
	}
	return tools, v.asOfLocked()
}

// Staleness is how long ago the view last synced successfully.
func (v *View) Staleness() time.Duration {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return time.Since(v.lastSync)
}

// Changed returns a channel closed at the next change of the view's tools,
// specs or live workers.
func (v *View) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.changed
}

// Close stops following changes and waits for the view's goroutines.
func (v *View) Close() {
	v.cancel()
	<-v.done
}
