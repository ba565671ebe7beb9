package mcptool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/worker"
)

// advertiseWait bounds how long a new generation may take to show up in
// the registry before the bridge gives up on it.
const advertiseWait = 30 * time.Second

// generation is one worker serving one version of the tool set.
type generation struct {
	id     string
	hashes map[string]string // fleet name -> spec hash
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's error, set before done is closed
}

// exited is closed when the worker's Run returned; nil (never ready) for
// no generation.
func (g *generation) exited() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.done
}

// stop ends the worker: it stops pulling, lets running calls finish within
// its shutdown grace, withdraws, and returns.
func (g *generation) stop() {
	g.cancel()
	<-g.done
}

// start runs a worker for tools and waits until the registry lists it for
// them. An empty set runs no worker: a nil generation.
func (b *Bridge) start(ctx context.Context, tools []windlass.Tool, hashes map[string]string) (*generation, error) {
	if len(tools) == 0 {
		b.cfg.Logger.Info("mcptool: no remote tools to serve")
		return nil, nil
	}
	cfg := b.cfg.Worker
	n := b.generations.Add(1)
	cfg.ID = b.cfg.Worker.ID + "-g" + strconv.FormatInt(n, 10)
	// Later generations replace the specs of earlier ones, which may still
	// be draining.
	cfg.Replace = cfg.Replace || n > 1
	w, err := worker.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("mcptool: %w", err)
	}
	for _, t := range tools {
		if err := w.Register(t); err != nil {
			return nil, fmt.Errorf("mcptool: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g := &generation{id: cfg.ID, hashes: hashes, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.err = w.Run(runCtx)
	}()
	if err := g.advertised(ctx, cfg, tools); err != nil {
		g.stop()
		return nil, err
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Spec().Name
	}
	b.cfg.Logger.Info("mcptool: serving remote tools", "worker", g.id, "tools", names)
	return g, nil
}

// advertised waits until the registry lists the generation's worker for
// every tool (without a registry: at once).
func (g *generation) advertised(ctx context.Context, cfg worker.Config, tools []windlass.Tool) error {
	if cfg.Registry == nil {
		return nil
	}
	deadline := time.Now().Add(advertiseWait)
	for {
		live := 0
		for _, t := range tools {
			info, err := cfg.Registry.Lookup(ctx, t.Spec().Name)
			if err == nil && slices.Contains(info.LiveWorkers(time.Now()), g.id) {
				live++
			}
		}
		if live == len(tools) {
			return nil
		}
		select {
		case <-g.done:
			return fmt.Errorf("mcptool: worker %s stopped before it served: %w", g.id, cmpErr(g.err))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mcptool: worker %s not listed in the registry within %s", g.id, advertiseWait)
		}
	}
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("no error")
	}
	return err
}
