package mcpserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass/dispatcher"
)

// Defaults of [Config].
const (
	DefaultName           = "windlass"
	DefaultQueueAllowance = 30 * time.Second
	DefaultApprovalWait   = time.Hour
	DefaultSessionTimeout = 30 * time.Minute
)

// Config configures a [Handler]. Zero values mean the documented defaults.
type Config struct {
	// Dispatcher lists and runs the tools. Required; never closed by the
	// handler.
	Dispatcher *dispatcher.Dispatcher
	// Name and Version identify the server to clients (serverInfo).
	// Default "windlass" and the protocol version "1".
	Name, Version string
	// Instructions are optional instructions for connected clients.
	Instructions string
	// QueueAllowance is added to a tool's timeout to bound a call's wait
	// for its result: time to wait for a free worker. Default 30s.
	QueueAllowance time.Duration
	// ApprovalWait is added to the bound of a call of a gated tool: the
	// longest a client waits for a person's decision. Default 1h, the
	// approval service's default window. The call is canceled in the fleet
	// when the bound passes.
	ApprovalWait time.Duration
	// SessionTimeout closes a session after this long without a request.
	// Default 30m.
	SessionTimeout time.Duration
	// Logger receives the handler's logs (and the MCP SDK's). Default:
	// discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Name = cmp.Or(c.Name, DefaultName)
	c.Version = cmp.Or(c.Version, "1")
	c.QueueAllowance = cmp.Or(c.QueueAllowance, DefaultQueueAllowance)
	c.ApprovalWait = cmp.Or(c.ApprovalWait, DefaultApprovalWait)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, DefaultSessionTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Dispatcher == nil:
		return errors.New("mcpserver: Config.Dispatcher is nil: pass a *dispatcher.Dispatcher")
	case c.QueueAllowance < 0 || c.ApprovalWait < 0 || c.SessionTimeout < 0:
		return errors.New("mcpserver: Config.QueueAllowance, Config.ApprovalWait and Config.SessionTimeout must not be negative")
	}
	return nil
}

// Handler serves the fleet's tools over MCP's streamable HTTP transport.
// It is an http.Handler, safe for concurrent use. [Handler.Close] it when
// done: it owns a goroutine that follows the fleet's tools.
type Handler struct {
	cfg    Config
	d      *dispatcher.Dispatcher
	server *mcp.Server
	http   *mcp.StreamableHTTPHandler

	mu         sync.Mutex
	advertised map[string]string // tool name -> spec hash, as in server

	base       context.Context // canceled by Close: waiting calls return
	stopAll    context.CancelFunc
	followDone chan struct{}
	closeOnce  sync.Once
}

// New builds the handler: it reads the dispatcher's catalog once (so the
// first tools/list is complete) and follows its changes until
// [Handler.Close]. ctx bounds only the first read.
func New(ctx context.Context, cfg Config) (*Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Handler{cfg: cfg, d: cfg.Dispatcher, advertised: map[string]string{}, followDone: make(chan struct{})}
	h.base, h.stopAll = context.WithCancel(context.Background())
	h.server = mcp.NewServer(&mcp.Implementation{Name: cfg.Name, Title: "Windlass fleet", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: cfg.Instructions,
		Logger:       cfg.Logger,
		// Tools come and go with the fleet: advertise the capability even
		// while the fleet has none.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	if err := h.sync(ctx); err != nil {
		h.stopAll()
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	h.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.server },
		&mcp.StreamableHTTPOptions{Logger: cfg.Logger, SessionTimeout: cfg.SessionTimeout})
	go h.follow()
	return h, nil
}

// ServeHTTP implements http.Handler: MCP's streamable HTTP transport
// (POST for requests, GET for the server's notification stream, DELETE to
// end a session).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.http.ServeHTTP(w, r) }

// Close stops following the fleet, ends the waits of calls in progress
// (their calls go on in the fleet; clients get an error result) and closes
// every session. It is idempotent.
func (h *Handler) Close() error {
	h.closeOnce.Do(func() {
		h.stopAll()
		<-h.followDone
		for s := range h.server.Sessions() {
			_ = s.Close()
		}
	})
	return nil
}
