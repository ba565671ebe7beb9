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
	DefaultSessionTimeout = 2 * time.Minute
	DefaultKeepAlive      = 10 * time.Second
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
	// SessionTimeout ends a session that has been idle this long: no
	// request of it open (neither a POST waiting for its answer nor the GET
	// notification stream) and none made. The session is closed and every
	// call it is waiting for is canceled in the fleet, reason "the MCP
	// session ended: expired after <SessionTimeout> idle". A connected
	// client is never idle while it waits for a call or keeps its
	// notification stream; one that went away (its process died, it gave
	// up without a cancellation) is. Default 2m: long enough for a client
	// to reconnect its stream, short enough that a held call of a client
	// that is gone leaves the approval dashboard within minutes.
	SessionTimeout time.Duration
	// KeepAlive is the longest gap between two progress notifications of a
	// call whose request has a progress token, while it is held for
	// approval, queued or running, so that a client that resets its
	// request timeout on progress (the TypeScript SDK's
	// resetTimeoutOnProgress) keeps waiting. Default 10s, well inside the
	// 60s request timeout MCP SDKs default to.
	KeepAlive time.Duration
	// Logger receives the handler's logs (and the MCP SDK's). Default:
	// discard.
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default: the one
// place the handler's defaults are decided.
func (c Config) withDefaults() Config {
	c.Name = cmp.Or(c.Name, DefaultName)
	c.Version = cmp.Or(c.Version, "1")
	c.QueueAllowance = cmp.Or(c.QueueAllowance, DefaultQueueAllowance)
	c.ApprovalWait = cmp.Or(c.ApprovalWait, DefaultApprovalWait)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, DefaultSessionTimeout)
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c after defaults; an error names the one field that is
// wrong.
func (c Config) validate() error {
	switch {
	case c.Dispatcher == nil:
		return errors.New("mcpserver: Config.Dispatcher is nil: pass a *dispatcher.Dispatcher")
	case c.QueueAllowance < 0:
		return fmt.Errorf("mcpserver: Config.QueueAllowance must not be negative, got %s", c.QueueAllowance)
	case c.ApprovalWait < 0:
		return fmt.Errorf("mcpserver: Config.ApprovalWait must not be negative, got %s", c.ApprovalWait)
	case c.SessionTimeout < 0:
		return fmt.Errorf("mcpserver: Config.SessionTimeout must not be negative, got %s", c.SessionTimeout)
	case c.KeepAlive < 0:
		return fmt.Errorf("mcpserver: Config.KeepAlive must not be negative, got %s", c.KeepAlive)
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

	sessions sessions // the sessions' liveness and the calls they wait for
	posts    inflight // POSTs in progress, whose answers Close lets out

	base       context.Context // canceled by Close: waiting calls return
	stopAll    context.CancelFunc
	followDone chan struct{}
	closeOnce  sync.Once
}

// New builds the handler: it reads the dispatcher's catalog once (so the
// first tools/list is complete) and follows its changes until
// [Handler.Close]. ctx bounds only the first read.
func New(ctx context.Context, cfg Config) (*Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, d: cfg.Dispatcher, advertised: map[string]string{}, followDone: make(chan struct{})}
	h.sessions.init(cfg.SessionTimeout, h.expire)
	h.base, h.stopAll = context.WithCancel(context.Background())
	h.server = mcp.NewServer(&mcp.Implementation{Name: cfg.Name, Title: "Windlass fleet", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: cfg.Instructions,
		Logger:       cfg.Logger,
		// Tools come and go with the fleet: advertise the capability even
		// while the fleet has none. Logging: a call's id is sent as a log
		// message as soon as the fleet accepted the call.
		//lint:ignore SA1019 MCP logging is deprecated as of protocol 2026-07-28 but functional during the deprecation window; see announce.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Logging: &mcp.LoggingCapabilities{}},
		// Every session is known from its first moment, so that its
		// idleness is tracked (see sessions.go).
		GetSessionID: h.newSession,
	})
	changed := h.d.Changed() // before the first read, so no change is missed
	if err := h.sync(ctx); err != nil {
		h.stopAll()
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	// The SDK's own SessionTimeout stays off: its expiry closes a session
	// gracefully, which waits for the calls in progress instead of ending
	// them. The handler expires idle sessions itself (sessions.go).
	// A request body holds a call's arguments: up to the dispatcher's
	// limit for arguments by reference, with room for the rest.
	h.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.server },
		&mcp.StreamableHTTPOptions{Logger: cfg.Logger, MaxRequestBodyBytes: cfg.Dispatcher.PayloadLimit() + requestEnvelope})
	go h.follow(changed)
	return h, nil
}

// requestEnvelope is the room a request body has beyond a call's
// arguments.
const requestEnvelope = 1 << 20

// ServeHTTP implements http.Handler: MCP's streamable HTTP transport
// (POST for requests, GET for the server's notification stream, DELETE to
// end a session). It counts each session's open requests, for its idle
// timeout, and all POSTs in progress, for Close, and cancels the calls of
// a session the client deletes before the session is closed. Once Close
// has begun it answers every request 503, with Retry-After.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		h.posts.begin()
		defer h.posts.end()
	}
	// Once Close has begun, nothing new: a session opened now would never
	// be closed, a call submitted now never waited for. Checked after the
	// POST is counted, so that Close waits for one that got past it.
	if h.base.Err() != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "mcpserver: shutting down; try another server", http.StatusServiceUnavailable)
		return
	}
	id := r.Header.Get(sessionIDHeader)
	switch {
	case id == "":
		// initialize: the SDK creates the session (newSession) and names
		// it in the response.
		h.http.ServeHTTP(w, r)
		if r.Method == http.MethodPost {
			h.sessions.created(w.Header().Get(sessionIDHeader), userOf(r.Context()))
		}
	case r.Method == http.MethodDelete:
		s := h.endSession(id, userOf(r.Context()), "deleted by the client")
		// The SDK closes the session, which waits for its tool calls:
		// they have their cancellation recorded in the fleet by then.
		h.http.ServeHTTP(w, r)
		if s != nil {
			h.sessions.forget(s)
		}
	default:
		s, ended := h.sessions.begin(id)
		if ended {
			http.Error(w, "session not found: it ended", http.StatusNotFound)
			return
		}
		if s != nil {
			defer h.sessions.end(s)
		}
		h.http.ServeHTTP(w, r)
	}
}

// closeWait bounds Close's wait for the answers of the requests in
// progress: past it, the sessions are closed anyway, and the answers not
// yet written are lost. A handler's longest last step is a cancellation
// sent to the fleet (cancelTimeout).
const closeWait = cancelTimeout + time.Second

// Close stops following the fleet, ends the waits of calls in progress
// (their calls go on in the fleet; each waiting request is answered with
// an error result, unavailable: the server is shutting down, and the call
// goes on, with its id), waits up to a few seconds (closeWait) for the
// POSTs in progress to end, so that those answers are written, and closes
// every session. It is idempotent.
func (h *Handler) Close() error {
	h.closeOnce.Do(func() {
		h.stopAll()
		// A session's close refuses every answer not yet written (the
		// SDK), so the sessions are closed once their POSTs ended.
		if !h.posts.wait(closeWait) {
			h.cfg.Logger.Warn("mcpserver: closing with requests in progress; their answers are lost", "waited", closeWait)
		}
		<-h.followDone
		h.sessions.close() // no more expiries; waits for those under way
		for s := range h.server.Sessions() {
			_ = s.Close()
		}
	})
	return nil
}

// inflight counts requests in progress, and lets Close wait, bounded, for
// none to be.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while no one waits
}

func (f *inflight) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
}

func (f *inflight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// wait waits until no request is in progress, at most d; false when d
// passed first.
func (f *inflight) wait(d time.Duration) bool {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return true
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}
