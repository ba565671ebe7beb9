package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/bearer"
	"github.com/windlass-dev/windlass/internal/telemetry"
)

// bodyEnvelope is the room a request body has beyond its arguments.
const bodyEnvelope = 1 << 20

// Defaults of [Config].
const (
	DefaultMaxWait      = 60 * time.Second
	DefaultMaxStaleness = 30 * time.Second
	DefaultKeepAlive    = 15 * time.Second
	// DefaultMaxStreams bounds the event streams one process serves at
	// once: each holds a consumer and a subscription on the NATS server.
	DefaultMaxStreams = 1000
	// DefaultMaxStreamsPerKey bounds the event streams of one API key.
	DefaultMaxStreamsPerKey = 100
	// DefaultBodyTimeout bounds the time a request body has to arrive.
	DefaultBodyTimeout = 30 * time.Second
)

// Config configures a [Handler]. Zero values mean the documented defaults.
type Config struct {
	// Dispatcher runs the calls. Required; never closed by the handler.
	Dispatcher *dispatcher.Dispatcher
	// APIKeys are the keys a request may present ("Authorization: Bearer
	// <key>"), as SHA-256 hashes. None: every request is let in, and New
	// logs a warning saying so.
	APIKeys []APIKey
	// MaxBodyBytes bounds a request body; a larger one is answered 413
	// payload_too_large. Default: the dispatcher's PayloadLimit (64 MiB by
	// default: arguments that large travel by reference) and 1 MiB for
	// the rest of the request.
	MaxBodyBytes int64
	// BodyTimeout bounds the time a request body has to arrive whole,
	// from when its headers were read: a body still incomplete then is
	// answered 408 request_timeout and its connection closed, where a
	// client sending a few bytes at a time would hold a connection and a
	// goroutine for as long as it liked. It bounds the body only, not the
	// wait for a result or an event stream after it (the server's
	// ReadTimeout would cut those). Default 30s. An Extra handler reading
	// a body past it gets the read's deadline error and answers it its own
	// way (the MCP server: 400).
	BodyTimeout time.Duration
	// MaxWait bounds how long POST /v1/calls waits for a result before it
	// answers 202 with the call's URL; a request's wait_ms may ask for
	// less, never more. Default 60s, under common proxies' idle timeouts.
	MaxWait time.Duration
	// Conn is the dispatcher's NATS connection: /readyz fails while it is
	// not connected. Default: nil, not checked.
	Conn *nats.Conn
	// MaxStaleness is how old the dispatcher's view of the registry may be
	// before /readyz fails (Redis unreachable that long). Default 30s.
	MaxStaleness time.Duration
	// KeepAlive is how often an idle event stream gets a comment line, so
	// that proxies keep it open. Default 15s.
	KeepAlive time.Duration
	// MaxStreams bounds the event streams (GET /v1/calls/{id}/events) open
	// at once in this process; one more is answered 429 too_many_streams
	// with a Retry-After. Each holds a JetStream consumer and a
	// subscription on the NATS server. Default 1000.
	MaxStreams int
	// MaxStreamsPerKey bounds the event streams open at once with one API
	// key, the same way. Without APIKeys only MaxStreams applies. Default
	// 100.
	MaxStreamsPerKey int
	// Extra mounts more handlers beside the API (for instance an MCP
	// server at "/mcp"): the key is an http.ServeMux pattern ("/mcp",
	// "POST /hooks/{id}"). They are served behind the same API-key check
	// and body limits (MaxBodyBytes, BodyTimeout: the handler sees the
	// read's error, and answers it); a pattern that clashes with the
	// API's routes is an error of New.
	Extra map[string]http.Handler
	// Logger receives the handler's logs. Default: discard.
	Logger *slog.Logger
}

// Handler is the HTTP API of a dispatcher: list tools, submit calls and
// wait for them, look them up, cancel them, follow their events. It is an
// http.Handler, safe for concurrent use; it holds no state of its own, so
// any number of replicas can serve the same fleet.
type Handler struct {
	cfg      Config
	keys     *bearer.Set
	streams  *streamSlots
	mux      *http.ServeMux
	draining context.Context // canceled by Drain
	drain    context.CancelFunc
}

// Route is one route of the API: a method and an http.ServeMux path
// pattern, as in the OpenAPI document.
type Route struct {
	// Method is the HTTP method (GET also serves HEAD).
	Method string
	// Path is the path pattern, with {id} for a call id.
	Path string
}

// route is a Route and how it is served.
type route struct {
	Route
	public bool // served without an API key (probes, the API's own document)
	serve  func(h *Handler, w http.ResponseWriter, r *http.Request)
}

// routes is the one table of the API's routes: the mux is built from it,
// and the tests check the OpenAPI document against it.
var routes = []route{
	{Route{"GET", "/v1/tools"}, false, (*Handler).listTools},
	{Route{"POST", "/v1/calls"}, false, (*Handler).createCall},
	{Route{"GET", "/v1/calls/{id}"}, false, (*Handler).getCall},
	{Route{"DELETE", "/v1/calls/{id}"}, false, (*Handler).cancelCall},
	{Route{"GET", "/v1/calls/{id}/events"}, false, (*Handler).callEvents},
	{Route{"GET", "/v1/openapi.json"}, true, (*Handler).openAPI},
	{Route{"GET", "/healthz"}, true, (*Handler).healthz},
	{Route{"GET", "/readyz"}, true, (*Handler).readyz},
}

// Routes lists the API's routes (not [Config.Extra]'s).
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, r := range routes {
		out[i] = r.Route
	}
	return out
}

// withDefaults returns c with every zero field set to its default: the one
// place the handler's defaults are decided.
func (c Config) withDefaults() Config {
	if c.MaxBodyBytes == 0 && c.Dispatcher != nil {
		c.MaxBodyBytes = c.Dispatcher.PayloadLimit() + bodyEnvelope
	}
	c.BodyTimeout = cmp.Or(c.BodyTimeout, DefaultBodyTimeout)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.MaxStaleness = cmp.Or(c.MaxStaleness, DefaultMaxStaleness)
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	c.MaxStreams = cmp.Or(c.MaxStreams, DefaultMaxStreams)
	c.MaxStreamsPerKey = cmp.Or(c.MaxStreamsPerKey, DefaultMaxStreamsPerKey)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c after defaults; an error names the one field that is
// wrong. The API keys are checked as New reads them (newKeySet), and an
// Extra pattern that clashes with a route as New mounts it.
func (c Config) validate() error {
	switch {
	case c.Dispatcher == nil:
		return errors.New("httpapi: Config.Dispatcher is nil: pass a *dispatcher.Dispatcher")
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("httpapi: Config.MaxBodyBytes must not be negative, got %d", c.MaxBodyBytes)
	case c.BodyTimeout < 0:
		return fmt.Errorf("httpapi: Config.BodyTimeout must not be negative, got %s", c.BodyTimeout)
	case c.MaxWait < 0:
		return fmt.Errorf("httpapi: Config.MaxWait must not be negative, got %s", c.MaxWait)
	case c.MaxStaleness < 0:
		return fmt.Errorf("httpapi: Config.MaxStaleness must not be negative, got %s", c.MaxStaleness)
	case c.KeepAlive < 0:
		return fmt.Errorf("httpapi: Config.KeepAlive must not be negative, got %s", c.KeepAlive)
	case c.MaxStreams < 0:
		return fmt.Errorf("httpapi: Config.MaxStreams must not be negative (0 is the default), got %d", c.MaxStreams)
	case c.MaxStreamsPerKey < 0:
		return fmt.Errorf("httpapi: Config.MaxStreamsPerKey must not be negative (0 is the default), got %d", c.MaxStreamsPerKey)
	}
	for _, pattern := range slices.Sorted(maps.Keys(c.Extra)) {
		if c.Extra[pattern] == nil {
			return fmt.Errorf("httpapi: Config.Extra[%q] is nil", pattern)
		}
	}
	return nil
}

// New builds the handler.
func New(cfg Config) (*Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	keys, err := newKeySet(cfg.APIKeys)
	if err != nil {
		return nil, err
	}
	if keys.Len() == 0 {
		cfg.Logger.Warn("httpapi: NO API KEYS CONFIGURED: the API is open to anyone who can reach it; configure API keys (hashes) unless this is a development fleet")
	}
	h := &Handler{cfg: cfg, keys: keys, streams: newStreamSlots(cfg.MaxStreams, cfg.MaxStreamsPerKey), mux: http.NewServeMux()}
	h.draining, h.drain = context.WithCancel(context.Background())
	allowed := map[string][]string{} // path -> its methods, in table order
	for _, r := range routes {
		serve := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(h, w, req) })
		if !r.public {
			serve = h.guard(serve)
		}
		h.mux.Handle(r.Method+" "+r.Path, serve)
		allowed[r.Path] = append(allowed[r.Path], r.Method)
	}
	// A known path with another method: 405 naming the allowed ones (the
	// catch-all below would otherwise answer 404).
	for path, methods := range allowed {
		allow := strings.Join(methods, ", ")
		h.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow))
		})
	}
	for pattern, extra := range cfg.Extra {
		if err := h.mount(pattern, extra); err != nil {
			return nil, err
		}
	}
	if _, taken := cfg.Extra["/"]; !taken { // an Extra "/" serves what no route does
		h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, CodeNotFound, fmt.Sprintf("no route %s %s; see GET /v1/openapi.json", r.Method, r.URL.Path))
		})
	}
	return h, nil
}

// mount adds an Extra handler, turning the mux's panic on a clashing
// pattern into an error.
func (h *Handler) mount(pattern string, extra http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("httpapi: Config.Extra[%q]: %v", pattern, p)
		}
	}()
	if h.keys.Len() > 0 {
		// The guard checked the key; this hands its name to an MCP
		// server's tool calls (RequestExtra.TokenInfo.UserID), the key
		// its calls are counted for.
		extra = auth.RequireBearerToken(h.tokenInfo, nil)(extra)
	}
	h.mux.Handle(pattern, h.guard(extra.ServeHTTP))
	return nil
}

// tokenInfo names the API key a token is, for an Extra handler that reads
// the MCP SDK's token info; the guard has checked the token already.
func (h *Handler) tokenInfo(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	name, ok := h.keys.Lookup(token)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: name, Expiration: time.Now().Add(tokenInfoLifetime)}, nil
}

// tokenInfoLifetime is how long a token's info is good for: API keys do
// not expire, and the SDK wants an expiry.
const tokenInfoLifetime = 24 * time.Hour

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// Drain makes the requests that wait answer now, for a server shutting
// down (register it with http.Server.RegisterOnShutdown): a POST
// /v1/calls waiting for its result answers 202 with the call's URL, and
// event streams end; the calls go on in the fleet. Requests that come
// after Drain answer at once the same way.
func (h *Handler) Drain() { h.drain() }

// keyName is the name of the API key a request presented, as the guard
// found it ("" when the handler has no keys).
func keyName(r *http.Request) string {
	name, _ := r.Context().Value(apiKeyName{}).(string)
	return name
}

// apiKeyName is the context key of the API key's name the guard found.
type apiKeyName struct{}

// guard checks the API key and bounds the body, in size and in time; the request's trace
// context (traceparent, tracestate, baggage) becomes its context's, so the
// call's spans join the caller's trace.
func (h *Handler) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ctx := telemetry.ExtractHTTP(r.Context(), r.Header); ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		if h.keys.Len() > 0 {
			token, _ := bearer.FromRequest(r)
			name, ok := h.keys.Lookup(token)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="windlass"`)
				writeError(w, CodeUnauthorized, "a valid API key is required: Authorization: Bearer <key>")
				return
			}
			h.cfg.Logger.DebugContext(r.Context(), "httpapi: request", "api_key", name, "method", r.Method, "path", r.URL.Path)
			r = r.WithContext(context.WithValue(r.Context(), apiKeyName{}, name))
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = h.timedBody(w, r.Body)
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
		}
		next(w, r)
	}
}

// timedBody bounds the time body has to arrive whole: a read deadline
// [Config.BodyTimeout] from now on the request's connection, cleared when
// a read of the body reaches its end, so that the wait or the stream that
// follows is not cut (net/http's HTTP/1 server clears it then too, as it
// starts watching for the client leaving; this does not rely on it). A
// read that fails leaves it (the server's discard of the rest of the
// body, after the handler, is bounded by it too), and so does a handler
// that does not read the body to its end: nothing reads the connection
// meanwhile.
func (h *Handler) timedBody(w http.ResponseWriter, body io.ReadCloser) io.ReadCloser {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.cfg.BodyTimeout)); err != nil {
		return body // not a connection (a test's recorder)
	}
	return &timedBody{ReadCloser: body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// timedBody is a request body whose read deadline is cleared at its end.
type timedBody struct {
	io.ReadCloser
	clear func()
	done  bool
}

// Read implements io.Reader.
func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.clear()
	}
	return n, err
}
