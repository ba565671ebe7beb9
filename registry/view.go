package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
)

// View is an in-memory copy of the registry that follows changes. Every
// Config.ResyncInterval, and at once when a change is announced, it checks
// the registry's version and the workers' lease expiries (one round trip,
// two commands); it rereads every tool only when the version moved, or
// when Config.FullResyncInterval passed since it last did. Reads never
// touch Redis. Safe for concurrent use.
type View struct {
	reg *Registry

	mu       sync.RWMutex
	tools    map[string]ToolInfo
	names    []string // sorted
	lastSync time.Time
	lastErr  error
	changed  chan struct{}

	// Touched only by sync (Watch, then the view's goroutine).
	raw      map[string]ToolInfo // the last full read, leases as stored in the tools' keys
	readAt   time.Time           // when the last full read started
	token    string              // the version token the last full read follows
	fullDone bool                // a full read succeeded since the last failed check
	// carried are tools the view still offers though Redis no longer
	// lists them, each with its leases held until it is dropped (see
	// carry).
	carried map[string]ToolInfo

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
	v := &View{reg: r, tools: map[string]ToolInfo{}, carried: map[string]ToolInfo{}, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
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

// sync checks the version and the lease index, rereads every tool when
// it must, and swaps the view.
func (v *View) sync(ctx context.Context) error {
	token, expiry, err := v.reg.readVersion(ctx)
	full := err == nil && (!v.fullDone || token != v.token || time.Since(v.readAt) >= v.reg.cfg.FullResyncInterval)
	var infos []ToolInfo
	readAt := time.Now()
	if full {
		infos, err = v.reg.List(ctx)
	}
	if err != nil {
		v.fullDone = false
		v.mu.Lock()
		defer v.mu.Unlock()
		v.lastErr = err
		return err
	}
	now := time.Now()
	if full {
		raw := make(map[string]ToolInfo, len(infos))
		for _, t := range infos {
			raw[t.Spec.Name] = t
		}
		v.carry(raw, now)
		v.raw, v.readAt, v.token, v.fullDone = raw, readAt, token, true
	}
	tools := make(map[string]ToolInfo, len(v.raw)+len(v.carried))
	names := make([]string, 0, len(v.raw)+len(v.carried))
	for name, t := range v.raw {
		tools[name] = v.withExpiry(t, expiry)
		names = append(names, name)
	}
	for name, t := range v.carried {
		if !now.Before(t.Workers[0].Expires) {
			delete(v.carried, name)
			continue
		}
		tools[name] = t
		names = append(names, name)
	}
	slices.Sort(names)
	v.mu.Lock()
	defer v.mu.Unlock()
	differs := !sameView(v.tools, tools, v.asOfLocked(), now)
	v.tools, v.names, v.lastSync, v.lastErr = tools, names, time.Now(), nil
	if differs {
		close(v.changed)
		v.changed = make(chan struct{})
	}
	return nil
}

// withExpiry returns t with each lease's expiry as the lease index has it
// now: a worker renews its leases without bumping the version, so the
// tools' keys the view read last hold their expiry as of then. A lease
// already lapsed when read stays lapsed (the worker no longer holds the
// tool, whatever its other leases); a worker the index no longer lists
// keeps the expiry read.
func (v *View) withExpiry(t ToolInfo, expiry map[string]time.Time) ToolInfo {
	workers := make([]WorkerLease, len(t.Workers))
	for i, w := range t.Workers {
		if e, ok := expiry[w.ID]; ok && w.Expires.After(v.readAt) && e.After(w.Expires) {
			w.Expires = e
		}
		workers[i] = w
	}
	t.Workers = workers
	return t
}

// carry records in v.carried the tools of the current view that a full
// read (raw) no longer lists. The registry never deletes a tool, so Redis
// lost it: restarted without persistence, or flushed. Its workers
// re-advertise at their next heartbeat; until then the view keeps routing
// to them: a worker live in the last view stays live for one TTL from when
// the loss was first seen, then the tool is dropped unless it was
// advertised again. Liveness is advice for routing only: a call routed to
// a worker that is really gone waits in its queue, bounded by its
// deadline.
func (v *View) carry(raw map[string]ToolInfo, now time.Time) {
	v.mu.RLock()
	prev, prevAsOf := v.tools, v.asOfLocked()
	v.mu.RUnlock()
	for name := range raw {
		delete(v.carried, name)
	}
	for name, old := range prev {
		if _, listed := raw[name]; listed {
			continue
		}
		if _, seen := v.carried[name]; seen || !old.HasLiveWorker(prevAsOf) {
			continue // already carried, or nobody served it: nothing to keep routing to
		}
		until := now.Add(v.reg.cfg.TTL)
		workers := make([]WorkerLease, 0, len(old.Workers))
		for _, w := range old.Workers {
			if w.Expires.After(prevAsOf) {
				workers = append(workers, WorkerLease{ID: w.ID, Expires: until})
			}
		}
		old.Workers = workers
		v.carried[name] = old
		v.reg.cfg.Logger.Warn("registry: a tool vanished from Redis (restarted or flushed?); routing by the last view until its workers re-advertise", "tool", name, "until", until)
	}
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

// MaxArgumentValues is the largest bound on argument values
// ([windlass.Spec.ArgumentValueLimit]) of the tools in the view, and
// [windlass.DefaultMaxArgumentValues] at least; read without copying the
// tools, as it is asked for every HTTP call request.
func (v *View) MaxArgumentValues() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := windlass.DefaultMaxArgumentValues
	for _, t := range v.tools {
		n = max(n, t.Spec.ArgumentValueLimit())
	}
	return n
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
