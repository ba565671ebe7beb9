package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/retry"
)

// listTimeout bounds one tools/list.
const listTimeout = 30 * time.Second

// remote is the connection to one MCP server: its current session (none
// while reconnecting) and its latest tool list, kept across reconnections.
type remote struct {
	b      *Bridge
	server Server

	mu      sync.Mutex
	session *mcp.ClientSession
	ready   chan struct{} // closed while session is set
	tools   []*mcp.Tool   // the latest list, sorted by name
	hasList bool
	broken  chan struct{} // a call saw the session fail (buffered 1)
}

func newRemote(b *Bridge, s Server) *remote {
	return &remote{b: b, server: s, ready: make(chan struct{}), broken: make(chan struct{}, 1)}
}

// listed returns the latest tool list, and whether there has been one.
func (r *remote) listed() ([]*mcp.Tool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools, r.hasList
}

// run keeps a session open until ctx ends: connect, list, follow list
// changes, and reconnect with backoff when the session is lost.
func (r *remote) run(ctx context.Context) {
	log := r.b.cfg.Logger.With("url", r.server.URL)
	waits := retry.Policy{Initial: r.b.cfg.MinBackoff, Max: r.b.cfg.MaxBackoff}.Waits()
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := r.serve(ctx, waits, log)
		if ctx.Err() != nil {
			return
		}
		wait := waits.Next()
		log.WarnContext(ctx, "mcptool: MCP server session lost; reconnecting", "error", err, "attempt", attempt, "retry_in", wait)
		retry.Sleep(ctx, wait)
	}
}

// serve runs one session: it returns why the session ended.
func (r *remote) serve(ctx context.Context, waits *retry.Waits, log *slog.Logger) error {
	changed := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "windlass-worker", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	connectCtx, cancel := context.WithTimeout(ctx, listTimeout)
	cs, err := client.Connect(connectCtx, &mcp.StreamableClientTransport{Endpoint: r.server.URL, HTTPClient: recordingClient(r.b.cfg.HTTPClient), MaxRetries: -1}, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	defer func() {
		r.setSession(nil)
		_ = cs.Close()
		<-ended
	}()
	if err := r.list(ctx, cs); err != nil {
		return err
	}
	waits.Reset()
	r.setSession(cs)
	log.Info("mcptool: connected to the MCP server", "session", cs.ID())
	for {
		select {
		case <-changed:
			if err := r.list(ctx, cs); err != nil {
				return err
			}
		case <-r.broken:
			return errors.New("a call found the session broken")
		case err := <-ended:
			ended <- err // for the deferred receive
			return fmt.Errorf("session ended: %w", cmpErr(err))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// list reads the server's tools and hands them to the bridge.
func (r *remote) list(ctx context.Context, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, t)
	}
	slices.SortFunc(tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	r.mu.Lock()
	r.tools, r.hasList = tools, true
	r.mu.Unlock()
	r.b.notify()
	return nil
}

// setSession makes cs the session calls use (nil: none, calls wait).
func (r *remote) setSession(cs *mcp.ClientSession) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case cs != nil && r.session == nil:
		close(r.ready)
	case cs == nil && r.session != nil:
		r.ready = make(chan struct{})
	}
	r.session = cs
}

// current waits for a session, bounded by ctx.
func (r *remote) current(ctx context.Context) (*mcp.ClientSession, error) {
	for {
		r.mu.Lock()
		cs, ready := r.session, r.ready
		r.mu.Unlock()
		if cs != nil {
			return cs, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("MCP server %s unreachable: %w", r.server.URL, context.Cause(ctx))
		}
	}
}

// tool makes the fleet tool of a remote tool.
func (r *remote) tool(name string, rt *mcp.Tool) (windlass.Tool, error) {
	var params map[string]any
	if rt.InputSchema != nil {
		b, err := json.Marshal(rt.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		if err := json.Unmarshal(b, &params); err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
	}
	if params == nil {
		params = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	spec := windlass.Spec{
		Name:        name,
		Description: strings.TrimSpace(cmpString(rt.Description, rt.Title)),
		Parameters:  params,
		Timeout:     r.b.cfg.ToolTimeout,
		Hints:       hintsOf(rt.Annotations),
	}
	remoteName, repeatable := rt.Name, repeatable(rt.Annotations)
	return windlass.NewTool(spec, func(ctx context.Context, args json.RawMessage) (any, error) {
		return r.call(ctx, remoteName, repeatable, args)
	})
}

func cmpString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// hintsOf maps a remote tool's annotations onto fleet hints.
func hintsOf(a *mcp.ToolAnnotations) *windlass.ToolHints {
	if a == nil {
		return nil
	}
	h := &windlass.ToolHints{ReadOnly: new(a.ReadOnlyHint), Idempotent: new(a.IdempotentHint), Destructive: a.DestructiveHint, OpenWorld: a.OpenWorldHint}
	return h
}

// repeatable reports whether a remote tool says that running it again
// changes nothing (its annotations: read-only, or idempotent), so a call
// whose answer was lost may be sent again.
func repeatable(a *mcp.ToolAnnotations) bool {
	return a != nil && (a.ReadOnlyHint || a.IdempotentHint)
}

// rejectedByTransport is the JSON-RPC code the MCP SDK gives a request
// its transport failed to carry, or whose answer it lost (the connection
// broke): not the server's answer, so the session is treated as broken
// and the call retried, like any other such failure.
const rejectedByTransport = -32005

// call forwards one call to the server. A session that fails under it is
// reconnected; the call is retried (by the worker, the error retryable)
// only when the server certainly did not take it (its request was never
// written, or was answered as not processed: see sendRecord) or when the
// tool is repeatable. Otherwise it may have run there, its answer lost,
// and running it again could repeat its effects: its caller is told so
// (unavailable), and it is not sent again.
func (r *remote) call(ctx context.Context, remoteName string, repeatable bool, args json.RawMessage) (any, error) {
	cs, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	// The fleet's call id is not sent as the remote call's (in _meta): a
	// windlass MCP server would take a retry for the same call — and the
	// broken session's end, which cancels that session's calls there,
	// would have answered it canceled. A retry is a new call there.
	sendCtx, sent := withSendRecord(ctx)
	res, err := cs.CallTool(sendCtx, &mcp.CallToolParams{Name: remoteName, Arguments: args})
	if err != nil {
		var wire *jsonrpc.Error
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.As(err, &wire) && wire.Code != rejectedByTransport:
			// The server answered with a protocol error (unknown tool,
			// invalid params): not worth retrying.
			return nil, fmt.Errorf("MCP server %s: tool %q: %w", r.server.URL, remoteName, err)
		default:
			// The session failed: reconnect.
			select {
			case r.broken <- struct{}{}:
			default:
			}
			if repeatable || sent.notTaken() {
				return nil, windlass.Retryable(fmt.Errorf("MCP server %s: tool %q: %w", r.server.URL, remoteName, err))
			}
			return nil, &windlass.CallError{Code: windlass.CodeUnavailable, Message: fmt.Sprintf(
				"The connection to the MCP server %s broke after the call to %q was sent (%v): it may have run there, its answer lost. It was not sent again, as the tool is not marked read-only or idempotent (MCP annotations): check whether it took effect before calling it again.",
				r.server.URL, remoteName, err)}
		}
	}
	return valueOf(res)
}

// valueOf turns an MCP tool result into the fleet tool's value: an error
// result is a tool_error with its text; structured content is the value;
// otherwise the text of the content.
func valueOf(res *mcp.CallToolResult) (any, error) {
	if res.IsError {
		return nil, &windlass.CallError{Code: windlass.CodeToolError, Message: contentText(res.Content)}
	}
	if res.StructuredContent != nil {
		return res.StructuredContent, nil
	}
	return contentText(res.Content), nil
}

// contentText joins the text of the content blocks; a block that is not
// text is included as its JSON.
func contentText(content []mcp.Content) string {
	parts := make([]string, 0, len(content))
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
			continue
		}
		if b, err := json.Marshal(c); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}
