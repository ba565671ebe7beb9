package mcptool

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/worker"
)

// Defaults of [Config].
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Server is one remote MCP server.
type Server struct {
	// URL is the server's streamable HTTP endpoint. Required.
	URL string
	// Prefix is put before each of its tool names (for instance "github_"),
	// to keep them apart from other servers' in the fleet. Default none.
	Prefix string
}

// Config configures a [Bridge]. Zero values mean the documented defaults.
type Config struct {
	// Servers are the MCP servers whose tools the bridge serves. At least
	// one.
	Servers []Server
	// Worker is the configuration of the workers that serve the tools:
	// JetStream (required), Registry, Releases, concurrency, … ID is the
	// base of each generation's id (default "mcp-<random>"); Replace
	// applies to the first generation (later ones always replace their
	// predecessor's specs); Logger defaults to Config.Logger.
	Worker worker.Config
	// Reserved are names the bridge must not give a remote tool: the other
	// tools of this process.
	Reserved []string
	// ToolTimeout is the timeout of every remote tool. Default
	// windlass.DefaultTimeout (30s).
	ToolTimeout time.Duration
	// HTTPClient talks to the servers. Default http.DefaultClient.
	HTTPClient *http.Client
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts to a server. Default 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives the bridge's logs. Default: discard.
	Logger *slog.Logger
}

// validate checks c after defaults; an error names the one field that is
// wrong. The rest of Config.Worker is checked by worker.New.
func (c Config) validate() error {
	switch {
	case len(c.Servers) == 0:
		return errors.New("mcptool: Config.Servers is empty: name at least one MCP server URL")
	case c.Worker.JetStream == nil:
		return errors.New("mcptool: Config.Worker.JetStream is nil: pass jetstream.New(nc)")
	case c.ToolTimeout < 0:
		return fmt.Errorf("mcptool: Config.ToolTimeout must not be negative, got %s", c.ToolTimeout)
	case c.MinBackoff < 0:
		return fmt.Errorf("mcptool: Config.MinBackoff must not be negative, got %s", c.MinBackoff)
	case c.MaxBackoff < 0:
		return fmt.Errorf("mcptool: Config.MaxBackoff must not be negative, got %s", c.MaxBackoff)
	}
	seen := map[string]bool{}
	for i, s := range c.Servers {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("mcptool: Config.Servers[%d].URL %q: want an http or https URL", i, s.URL)
		}
		if seen[s.URL] {
			return fmt.Errorf("mcptool: Config.Servers[%d].URL %q is listed twice", i, s.URL)
		}
		seen[s.URL] = true
	}
	return nil
}

// withDefaults returns c with every zero field set to its default: the one
// place the bridge's defaults are decided.
func (c Config) withDefaults() Config {
	c.ToolTimeout = cmp.Or(c.ToolTimeout, windlass.DefaultTimeout)
	c.MinBackoff = cmp.Or(c.MinBackoff, DefaultMinBackoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, DefaultMaxBackoff)
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Worker.Logger == nil {
		c.Worker.Logger = c.Logger
	}
	if c.Worker.ID == "" {
		c.Worker.ID = "mcp-" + strings.ToLower(rand.Text()[:10])
	}
	return c
}

// Mapping is one remote tool and the fleet name it is served under.
type Mapping struct {
	// Tool is the fleet tool's name.
	Tool string
	// Remote is the tool's name on its MCP server.
	Remote string
	// URL is the MCP server's URL.
	URL string
}

// toolKey identifies a remote tool.
type toolKey struct{ url, remote string }

// Bridge serves the tools of remote MCP servers in the fleet. Create it
// with [New] and [Bridge.Run] it; its methods are safe for concurrent use.
type Bridge struct {
	cfg     Config
	remotes []*remote
	updates chan struct{} // a remote listed its tools (buffered 1)

	generations atomic.Int64 // workers started, for their ids

	mu    sync.Mutex
	names map[toolKey]string // remote tool -> fleet name
	owner map[string]toolKey // fleet name -> remote tool
}

// New returns a bridge over cfg's servers. It connects to nothing until
// Run.
func New(cfg Config) (*Bridge, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Bridge{cfg: cfg, updates: make(chan struct{}, 1), names: map[toolKey]string{}, owner: map[string]toolKey{}}
	for _, s := range cfg.Servers {
		b.remotes = append(b.remotes, newRemote(b, s))
	}
	return b, nil
}

// Mapping returns the fleet names of the remote tools, sorted by fleet
// name.
func (b *Bridge) Mapping() []Mapping {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Mapping, 0, len(b.names))
	for k, n := range b.names {
		out = append(out, Mapping{Tool: n, Remote: k.remote, URL: k.url})
	}
	slices.SortFunc(out, func(a, b Mapping) int { return strings.Compare(a.Tool, b.Tool) })
	return out
}

// notify tells Run that a remote's tool list changed.
func (b *Bridge) notify() {
	select {
	case b.updates <- struct{}{}:
	default:
	}
}

// Run connects to every server and serves their tools until ctx ends, then
// stops the worker (running calls finish within its ShutdownGrace) and
// closes the sessions. It returns nil after a clean stop.
func (b *Bridge) Run(ctx context.Context) error {
	var remotes sync.WaitGroup
	for _, r := range b.remotes {
		remotes.Go(func() { r.run(ctx) })
	}
	defer remotes.Wait()

	var current *generation
	var retiring sync.WaitGroup // previous generations draining
	defer retiring.Wait()
	var again <-chan time.Time // a failed start, tried again after a wait
	waits := retry.Policy{Initial: b.cfg.MinBackoff, Max: b.cfg.MaxBackoff}.Waits()
	for {
		select {
		case <-ctx.Done():
			if current != nil {
				current.stop()
			}
			return nil
		case <-b.updates:
		case <-again:
		case <-current.exited():
			// The worker stopped on its own (an error, such as a registry
			// conflict): start another.
			b.cfg.Logger.Warn("mcptool: the worker of the remote tools stopped; starting another", "worker", current.id, "error", current.err)
			current = nil
		}
		again = nil
		tools, hashes := b.desired()
		if current != nil && maps.Equal(current.hashes, hashes) {
			continue
		}
		next, err := b.start(ctx, tools, hashes)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			wait := waits.Next()
			b.cfg.Logger.Warn("mcptool: could not serve the remote tools; retrying", "error", err, "retry_in", wait)
			again = time.After(wait)
			continue
		}
		waits.Reset()
		if old := current; old != nil {
			retiring.Go(old.stop)
		}
		current = next
	}
}

// desired builds the fleet tools of every remote's latest list, naming new
// ones and freeing the names of tools no longer listed. hashes maps each
// fleet name to its spec hash.
func (b *Bridge) desired() ([]windlass.Tool, map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	listed := map[toolKey]bool{}
	var tools []windlass.Tool
	hashes := map[string]string{}
	for _, r := range b.remotes {
		remoteTools, ok := r.listed()
		if !ok {
			// Never listed: keep the names it had, if any.
			for k := range b.names {
				if k.url == r.server.URL {
					listed[k] = true
				}
			}
			continue
		}
		for _, rt := range remoteTools {
			k := toolKey{r.server.URL, rt.Name}
			listed[k] = true
			name, ok := b.names[k]
			if !ok {
				name = unique(sanitize(r.server.Prefix, rt.Name), func(n string) bool {
					_, used := b.owner[n]
					return used || slices.Contains(b.cfg.Reserved, n)
				})
				b.names[k], b.owner[name] = name, k
				b.cfg.Logger.Info("mcptool: tool mapped", "url", r.server.URL, "remote", rt.Name, "tool", name)
			}
			t, err := r.tool(name, rt)
			if err != nil {
				b.cfg.Logger.Warn("mcptool: remote tool not served", "url", r.server.URL, "remote", rt.Name, "error", err)
				continue
			}
			tools = append(tools, t)
			hashes[name] = t.Spec().Hash()
		}
	}
	for k, n := range b.names {
		if !listed[k] {
			delete(b.names, k)
			delete(b.owner, n)
			b.cfg.Logger.Info("mcptool: tool unmapped", "url", k.url, "remote", k.remote, "tool", n)
		}
	}
	return tools, hashes
}
