package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/worker"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// listFlag is a repeatable flag; its environment fallback is a
// comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value: each use adds its comma-separated entries.
func (l *listFlag) Set(v string) error {
	*l = append(*l, splitList(v)...)
	return nil
}

// mcpFlag is worker --mcp: the MCP servers whose tools to serve.
func mcpFlag(fs *flag.FlagSet) *listFlag {
	l := &listFlag{}
	fs.Var(l, "mcp", "serve the tools of a remote MCP server (streamable HTTP URL, or PREFIX=URL to prefix its tool names); repeatable ($"+env("mcp")+", comma-separated)")
	return l
}

// flagGiven reports whether a flag was set on the command line or in its
// environment variable (parseArgs sets it from there).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// mcpServers reads --mcp (or its environment variable).
func mcpServers(l listFlag) []mcptool.Server {
	entries := []string(l)
	var out []mcptool.Server
	for _, e := range entries {
		s := mcptool.Server{URL: strings.TrimSpace(e)}
		if prefix, url, ok := strings.Cut(s.URL, "="); ok && !strings.Contains(prefix, "/") && !strings.Contains(prefix, ":") {
			s.Prefix, s.URL = prefix, url
		}
		out = append(out, s)
	}
	return out
}

// runWithBridge runs the worker of the demo tools (if any) and a bridge of
// the --mcp servers (if any) until ctx ends.
func runWithBridge(ctx context.Context, w *worker.Worker, tools []windlass.Tool, servers listFlag, wcfg worker.Config, log *slog.Logger) error {
	list := mcpServers(servers)
	if len(list) == 0 {
		return w.Run(ctx)
	}
	reserved := make([]string, len(tools))
	for i, t := range tools {
		reserved[i] = t.Spec().Name
	}
	b, err := mcptool.New(mcptool.Config{Servers: list, Worker: wcfg, Reserved: reserved, Logger: log})
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--mcp: %w", err)}
	}
	if len(tools) == 0 {
		return b.Run(ctx)
	}
	// Both until ctx ends; if one stops early, stop the other.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var werr, berr error
	wg.Go(func() { defer cancel(); werr = w.Run(ctx) })
	wg.Go(func() { defer cancel(); berr = b.Run(ctx) })
	wg.Wait()
	return errors.Join(werr, berr)
}

// mountMCP builds the MCP server of dispatcher --mcp-path (none for an
// empty path). Its sessions end when ctx does, so that the HTTP server's
// graceful shutdown does not wait on their streams; stop closes it.
func mountMCP(ctx context.Context, d *dispatcher.Dispatcher, path string, log *slog.Logger) (extra map[string]http.Handler, stop func(), err error) {
	if path == "" {
		return nil, func() {}, nil
	}
	if !strings.HasPrefix(path, "/") {
		return nil, nil, &exitError{code: 2, err: fmt.Errorf("--mcp-path %q must start with /", path)}
	}
	h, err := mcpserver.New(ctx, mcpserver.Config{Dispatcher: d, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	closeOnDone := context.AfterFunc(ctx, func() { _ = h.Close() })
	log.Info("dispatcher: MCP server mounted", "path", path)
	return map[string]http.Handler{path: h}, func() { closeOnDone(); _ = h.Close() }, nil
}
