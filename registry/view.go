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
	v := &View{reg: r, tools: map[string]ToolInfo{}, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
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
	}
	differs := !sameView(v.tools, tools, v.asOfLocked(), time.Now())
	v.tools, v.names, v.lastSync, v.lastErr = tools, names, time.Now(), nil
	if differs {
		close(v.changed)
		v.changed = make(chan struct{})
	}
	return nil
}

// sameView reports whether two views offer the same tools, specs and live
// workers.
func sameView(a, b map[string]ToolInfo, atA, atB time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for name, ta := range a {
		tb, ok := b[name]
		if !ok || ta.Hash != tb.Hash || !slices.Equal(ta.LiveWorkers(atA), tb.LiveWorkers(atB)) {
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
