package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

func runDispatcher(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "apikey" {
		if len(args) > 2 {
			return &exitError{code: 2, err: errors.New("usage: windlass dispatcher apikey [NAME]")}
		}
		key := httpapi.NewAPIKey()
		entry := httpapi.HashAPIKey(key)
		if len(args) == 2 {
			entry = args[1] + "=" + entry
		}
		fmt.Fprintf(stdout, "# give the client this API key (Authorization: Bearer <key>):\n%s\n# and the dispatcher this --api-keys entry (or a line of --api-key-file):\n%s\n", key, entry)
		return nil
	}
	fs := newFlags("dispatcher", "dispatcher [flags] | dispatcher apikey [NAME]", stderr)
	c := commonFlags(fs)
	listen := stringFlag(fs, "listen", "127.0.0.1:8080", "address of the HTTP API (/v1/...) and its probes (/healthz, /readyz)")
	apiKeys := stringFlag(fs, "api-keys", "", "comma-separated accepted API keys as [name=]<sha256 hex> (windlass dispatcher apikey); none: the API is open")
	apiKeyFile := stringFlag(fs, "api-key-file", "", "file of accepted API keys, one [name=]<sha256 hex> a line, # comments; adds to --api-keys")
	maxBody := intFlag(fs, "max-body", 0, "largest request body, in bytes (0: the payload limit and 1 MiB)")
	inline, payloadLimit := payloadFlags(fs)
	maxWait := durationFlag(fs, "max-wait", httpapi.DefaultMaxWait, "longest a POST /v1/calls waits for the result before answering 202 with the call's URL")
	replicas := intFlag(fs, "replicas", 1, "replicas of the streams when this dispatcher creates them")
	metricsListen := metricsFlag(fs)
	mcpPath := stringFlag(fs, "mcp-path", "/mcp", "path of the MCP server (streamable HTTP) beside the API, behind the same API keys; empty: none")
	readLimits := limitsFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("dispatcher: unknown argument %q (subcommand: apikey)", pos[0])}
	}
	keys, err := readAPIKeys(*apiKeys, *apiKeyFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	lim, err := readLimits()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	sess, err := c.open("dispatcher", stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	stopTelemetry, err := startTelemetry(ctx, "windlass-dispatcher", *metricsListen, sess.log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: sess.nc, Registry: sess.reg, ID: sess.dispatcherID, Replicas: *replicas, Logger: sess.log,
		InlineLimit: int64(*inline), PayloadLimit: int64(*payloadLimit), Limits: lim})
	if err != nil {
		return err
	}
	defer d.Close()
	extra, stopMCP, err := mountMCP(ctx, d, *mcpPath, sess.log)
	if err != nil {
		return err
	}
	defer stopMCP()
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, APIKeys: keys, MaxBodyBytes: int64(*maxBody), MaxWait: *maxWait, Conn: sess.nc, Logger: sess.log, Extra: extra})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	sess.log.Info("dispatcher: serving", "url", "http://"+ln.Addr().String()+"/v1/", "api_keys", len(keys), "dispatcher_id", d.ID())
	return serveAPI(ctx, h, ln, sess.log)
}

// readAPIKeys reads --api-keys and the lines of --api-key-file.
func readAPIKeys(list, file string) ([]httpapi.APIKey, error) {
	entries := splitList(list)
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--api-key-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
				entries = append(entries, line)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--api-key-file %s: %w", file, err)
		}
	}
	var keys []httpapi.APIKey
	for _, e := range entries {
		k, err := httpapi.ParseAPIKey(e)
		if err != nil {
			return nil, fmt.Errorf("--api-keys/--api-key-file: %w", err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// apiShutdownGrace bounds a graceful shutdown of the API server;
// apiDrainGrace is how long drained requests have to answer before every
// request's context is canceled (ending, say, an MCP stream of an Extra
// handler, which Drain does not reach).
const (
	apiShutdownGrace = 10 * time.Second
	apiDrainGrace    = 2 * time.Second
)

// serveAPI serves h on ln until ctx ends, then shuts down gracefully:
// waiting requests are drained (they answer 202 with the call's URL, event
// streams end), the contexts of requests still open are canceled after
// apiDrainGrace, and connections still open after apiShutdownGrace are
// closed.
func serveAPI(ctx context.Context, h *httpapi.Handler, ln net.Listener, log *slog.Logger) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	// No write timeout: a call's wait and an event stream are long by
	// design, and bounded by the handler.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return base },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(h.Drain)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("HTTP API: %w", err)
	case <-ctx.Done():
	}
	timer := time.AfterFunc(apiDrainGrace, cancelBase)
	defer timer.Stop()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiShutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc // Serve returned ErrServerClosed
	if err != nil {
		log.Warn("HTTP API: requests still open at shutdown; closing their connections", "error", err)
		_ = srv.Close()
	}
	return nil
}
