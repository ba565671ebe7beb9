package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/internal/textcut"
)

// Keys of _meta in tools/list entries, tools/call requests, results and
// notifications.
const (
	// MetaCallID is the fleet's call id of the call, for windlass status,
	// watch or the approval dashboard. The server sends it in the result's
	// _meta, in the _meta of every progress notification of the call, and
	// in a log message (notifications/message) as soon as the fleet
	// accepted the call.
	//
	// In a tools/call request's _meta it is the client's own id for the
	// call, such as the model's tool-call id: the call id is the fleet's
	// deduplication key, so a request repeating the id of an earlier call
	// is that call, run once: a retry after a lost connection or a restart
	// gets its answer; one after the client canceled the earlier request
	// (as the MCP SDKs do when a request times out) gets the call as the
	// cancellation left it: canceled, unless it had finished or another
	// request still waited for it (see the package doc). The id must pass
	// [windlass.ValidateCallID]; another is refused with an isError
	// result, code invalid_call.
	MetaCallID = layout.MCPMetaCallID
	// MetaErrorCode is the result's error code (invalid_arguments,
	// timeout, rejected, …) when isError is set.
	MetaErrorCode = "dev.windlass/error_code"
	// MetaRetryAfterMS is, beside MetaErrorCode, how many milliseconds to
	// wait before calling again, when the error says (rate_limited and
	// overloaded refusals: the call was not queued; a tool's retryable
	// failure that asked for a delay): a number.
	MetaRetryAfterMS = "dev.windlass/retry_after_ms"
	// MetaSpecHash, in a listed tool's _meta, is the hash of the tool's
	// spec the listing shows. The server pins each call to the spec it
	// last listed: a call of a tool changed since is refused spec_mismatch
	// (the list changes, notifications/tools/list_changed, and the
	// client lists the tools again).
	MetaSpecHash = "dev.windlass/spec_hash"
)

// callTarget is the tool a tools/call request runs, as last advertised.
type callTarget struct {
	name    string
	hash    string
	spec    windlass.Spec // decides which calls wait for approval (Spec.NeedsApproval)
	timeout time.Duration
}

// cancelTimeout bounds the cancellation sent to the fleet for a call its
// client canceled.
const cancelTimeout = 5 * time.Second

// maxClientName bounds the client's name (clientInfo.name) in a call's
// metadata (mcp_client): the client chooses it, and every call message
// carries it.
const maxClientName = 256

// errPastTheBound is the cause a call's wait ends with when the MCP
// server's bound for it passes.
var errPastTheBound = errors.New("mcpserver: no result within the MCP server's bound")

// requestedCallID is the call id a tools/call request asks for in its
// _meta, or a new one; refusal is the answer to an invalid one. withID is
// the option that gives the call its id: the client's own
// (dispatcher.WithCallID: a retry of it is the same call), or a new one
// (dispatcher.WithNewCallID).
func requestedCallID(meta mcp.Meta) (id string, withID dispatcher.CallOption, refusal *mcp.CallToolResult) {
	v, ok := meta[MetaCallID]
	if !ok {
		id := windlass.NewCallID()
		return id, dispatcher.WithNewCallID(id), nil
	}
	id, isString := v.(string)
	if !isString {
		got, _ := json.Marshal(v)
		return "", nil, errorResult("", windlass.CodeInvalidCall, fmt.Sprintf(
			"_meta[%q] must be a string: the call's id, 1 to %d printable ASCII characters without spaces, quotes or backslashes; got %s.",
			MetaCallID, windlass.MaxCallIDLength, got))
	}
	if err := windlass.ValidateCallID(id); err != nil {
		return "", nil, errorResult("", windlass.CodeInvalidCall, fmt.Sprintf("_meta[%q]: %s.", MetaCallID, strings.TrimPrefix(err.Error(), "windlass: ")))
	}
	return id, dispatcher.WithCallID(id), nil
}

// call runs one tools/call through the fleet: submit, then follow the
// call's events until its result.
func (h *Handler) call(ctx context.Context, req *mcp.CallToolRequest, t callTarget) (*mcp.CallToolResult, error) {
	ctx = requestTrace(ctx, req)
	id, withID, refusal := requestedCallID(req.Params.Meta)
	if refusal != nil {
		return refusal, nil
	}
	args := json.RawMessage(bytes.TrimSpace(req.Params.Arguments))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	bound := t.timeout + h.cfg.QueueAllowance
	gated, _ := t.spec.NeedsApproval(args) // the dispatcher decides the same, and logs an error
	if gated {
		bound += h.cfg.ApprovalWait
	}
	deadline := time.Now().Add(bound)
	meta := map[string]string{"via": "mcp"}
	if info := req.ClientInfo(); info != nil && info.Name != "" {
		meta["mcp_client"] = textcut.Cut(info.Name, maxClientName)
	}

	// The wait joins its session before the call is submitted: from here
	// on, the session's end ends the wait (cause *sessionEndedError), and
	// the call is canceled.
	sessionCtx, endWait := context.WithCancelCause(ctx)
	defer endWait(nil)
	w := &waiter{callID: id, cancel: endWait}
	var user string
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		user = extra.TokenInfo.UserID
	}
	if err := h.sessions.join(sessionID(req), w, user); err != nil {
		return errorResult("", windlass.CodeCanceled, fmt.Sprintf("The call to %q was not made: %v.", t.name, err)), nil
	}
	defer func() {
		if owed := h.sessions.leave(w); owed != "" {
			// The last request for the call, refused or ended: the
			// cancellation another left to it is done now.
			h.cancelCall(ctx, h.cfg.Logger.With("call_id", id, "tool", t.name), id, owed)
		}
	}()

	// Once begun, the submit is not given up when the client cancels the
	// request (nor when its session ends): the fleet may have stored the
	// call, and a worker started it, before the acknowledgement arrives,
	// so only a submit that ended says whether there is a call to cancel.
	// The wait below then ends at once, and the call is canceled. Close
	// ends the submit.
	if err := ctx.Err(); err != nil {
		return nil, err // canceled before anything was submitted
	}
	submitCtx, stopSubmit := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSubmit()
	stopOnClose := context.AfterFunc(h.base, stopSubmit)
	defer stopOnClose()
	// The caller's key for the fleet's limits: who the token says it is.
	_, err := h.d.Submit(submitCtx, t.name, args, withID, dispatcher.WithSpecHash(t.hash),
		dispatcher.WithDeadline(deadline), dispatcher.WithMetadata(meta), dispatcher.WithKey(user))
	if err != nil {
		var ce *windlass.CallError
		if errors.As(err, &ce) {
			known := "" // refused: there is no call
			if errors.Is(err, dispatcher.ErrUnavailable) {
				known = id // unconfirmed: the call may be queued; a retry with this id is the same call
			}
			return withRetryAfter(errorResult(known, ce.Code, ce.Message), ce), nil
		}
		return nil, fmt.Errorf("mcpserver: call %q: %w", t.name, err)
	}
	h.sessions.accepted(w)
	log := h.cfg.Logger.With("call_id", id, "tool", t.name)
	log.DebugContext(ctx, "mcpserver: call submitted")

	// The wait ends with the client's request, with its session, at Close,
	// or a little after the call's deadline (the fleet answers timeout by
	// then).
	waitCtx, cancel := context.WithDeadlineCause(sessionCtx, deadline.Add(2*time.Second), errPastTheBound)
	defer cancel()
	stop := context.AfterFunc(h.base, cancel)
	defer stop()

	state := "queued, waiting for a worker"
	if gated {
		state = "waiting for a person's approval"
	}
	h.announce(ctx, req.Session, id, t.name, state)
	progress := &progressSender{session: req.Session, token: req.Params.GetProgressToken(), callID: id}
	progress.send(ctx, 0, progressMessage(state, id))

	res, watchErr := h.await(ctx, waitCtx, cancel, id, state, progress)
	if res != nil {
		return res, nil
	}
	var ended *sessionEndedError
	switch {
	case errors.As(context.Cause(sessionCtx), &ended):
		// The client is gone, or asked for its session to end: cancel the
		// call in the fleet, unless a request of another session waits
		// for it too (a retry of the same call id).
		if !h.sessions.leaveCanceling(w, ended.Error()) {
			log.DebugContext(ctx, "mcpserver: session ended; another session waits for the call", "reason", ended.why)
			return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf("%v; the call goes on for another request waiting for it (call id %s).", ended, id)), nil
		}
		h.cancelCall(ctx, log, id, ended.Error())
		return errorResult(id, windlass.CodeCanceled, fmt.Sprintf("Tool %q was canceled: %v (call id %s).", t.name, ended, id)), nil
	case h.base.Err() != nil:
		// Close: the call goes on in the fleet. Checked before the
		// request's end: once the SDK's session close begins, it ends the
		// session's other requests in progress too (ErrServerClosing).
		return errorResult(id, windlass.CodeUnavailable, "The MCP server is shutting down; the call goes on in the fleet (call id "+id+")."), nil
	case clientCanceled(ctx):
		// The client canceled: cancel the call in the fleet, so that a
		// queued call never runs and a running one stops — unless another
		// request waits for it too (a retry of the same call id).
		if !h.sessions.leaveCanceling(w, "canceled by the MCP client") {
			log.DebugContext(ctx, "mcpserver: request canceled; another request waits for the call")
			return nil, ctx.Err()
		}
		h.cancelCall(ctx, log, id, "canceled by the MCP client")
		return nil, ctx.Err()
	case ctx.Err() != nil:
		// The SDK ended the request, not the client (the session's
		// connection failed): as for a dropped POST, that is not taken for
		// the client's end; the call goes on, and a retry with its id
		// joins it.
		log.DebugContext(ctx, "mcpserver: request ended by the SDK; the call goes on", "cause", context.Cause(ctx))
		return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf("The MCP request ended (%v); the call goes on in the fleet (call id %s).", context.Cause(ctx), id)), nil
	case errors.Is(context.Cause(waitCtx), errPastTheBound):
		// Canceled in the fleet, unless another request waits for the
		// call too (it joined later: its bound passes later).
		if !h.sessions.leaveCanceling(w, "no result within the MCP server's bound") {
			log.DebugContext(ctx, "mcpserver: no result within the bound; another request waits for the call")
			return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf(
				"No result of the call to %q within %s; the call goes on for another request waiting for it (call id %s).", t.name, bound.Round(time.Second), id)), nil
		}
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		defer ccancel()
		return h.pastTheBound(cctx, t.name, id, bound), nil
	default:
		// The call could not be followed (await ends waitCtx as it
		// returns, so its end says nothing here): the call goes on, and a
		// request with its id asks again.
		if watchErr == nil {
			watchErr = errors.New("its events ended without a result")
		}
		log.WarnContext(ctx, "mcpserver: following the call failed; the call goes on", "error", watchErr)
		return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf(
			"The fleet could not report the result of the call to %q now; the call goes on: ask for call %s's result later: %v", t.name, id, watchErr)), nil
	}
}

// pastTheBound answers a call whose result did not come within the MCP
// server's bound: it is canceled in the fleet, and the client told it
// timed out — unless it finished meanwhile (its result, then: the
// cancellation found it answered), or whether it did cannot be read
// (unavailable, with its id: it may have run, and succeeded).
func (h *Handler) pastTheBound(ctx context.Context, name, id string, bound time.Duration) *mcp.CallToolResult {
	var finished *dispatcher.FinishedError
	switch err := h.d.Cancel(ctx, id, "no result before the MCP server's bound"); {
	case errors.As(err, &finished):
		r, err := h.d.Result(ctx, id) // its content, fetched if by reference
		if err != nil {
			return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf(
				"The call to %q finished, but its result could not be fetched now; ask for call %s's result later: %v", name, id, err))
		}
		return resultOf(r)
	case err != nil:
		return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf(
			"No result of the call to %q within %s, and whether it finished could not be read (it may have run, and succeeded); ask for call %s's result later: %v", name, bound.Round(time.Second), id, err))
	}
	return errorResult(id, windlass.CodeTimeout, fmt.Sprintf("Tool %q timed out: no result within %s.", name, bound.Round(time.Second)))
}

// clientCanceled reports whether the client canceled the request ctx
// (notifications/cancelled): the SDK cancels it without a cause then. It
// gives other causes when it ends a request itself — ErrServerClosing
// when a session's close begins or a response cannot be written, the read
// error when the connection's reading ends — which are not the client's
// cancellation.
func clientCanceled(ctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(ctx) == context.Canceled
}

// sessionID is the id of the MCP session a request came in.
func sessionID(req *mcp.CallToolRequest) string {
	if req.Session == nil {
		return ""
	}
	return req.Session.ID()
}

// cancelCall cancels a call in the fleet for reason; a call that finished
// meanwhile keeps its result.
func (h *Handler) cancelCall(ctx context.Context, log *slog.Logger, id, reason string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	var finished *dispatcher.FinishedError
	switch err := h.d.Cancel(cctx, id, reason); {
	case errors.As(err, &finished):
		log.DebugContext(ctx, "mcpserver: call finished before its cancellation", "reason", reason, "code", cmp.Or(string(finished.Result.Code()), "success"))
	case errors.Is(err, dispatcher.ErrCanceledUnanswered):
		log.InfoContext(ctx, "mcpserver: call canceled; its canceled result is left to whoever holds the call", "reason", reason, "error", err)
	case err != nil:
		log.WarnContext(ctx, "mcpserver: canceling the call failed", "reason", reason, "error", err)
	default:
		log.DebugContext(ctx, "mcpserver: call canceled", "reason", reason)
	}
}

// await follows the call's events until its result, which it returns.
// Meanwhile it sends the client progress notifications: the tool's
// reports, and a keepalive saying what the call waits for whenever none
// was sent for Config.KeepAlive. It returns nil and the watch's error (if
// any) when waitCtx ends first.
func (h *Handler) await(ctx, waitCtx context.Context, cancel context.CancelFunc, id, state string, progress *progressSender) (*mcp.CallToolResult, error) {
	type item struct {
		ev  windlass.Event
		err error
	}
	events := make(chan item)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(events)
		for ev, err := range h.d.Watch(waitCtx, id) {
			select {
			case events <- item{ev, err}:
			case <-waitCtx.Done():
				return
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()

	keepAlive := time.NewTimer(h.cfg.KeepAlive)
	defer keepAlive.Stop()
	tick := keepAlive.C
	if !progress.wanted() {
		tick = nil
	}
	for {
		select {
		case it, ok := <-events:
			if !ok {
				return nil, nil
			}
			if it.err != nil {
				return nil, it.err
			}
			switch ev := it.ev; ev.Kind {
			case windlass.EventStarted:
				state = "running"
			case windlass.EventRetrying:
				state = "waiting to retry after a failed attempt"
			case windlass.EventProgress:
				if p := ev.Progress; p != nil {
					state = "running"
					if p.Message != "" {
						state += ": " + p.Message
					}
					if progress.report(ctx, p.Fraction, p.Message) {
						keepAlive.Reset(h.cfg.KeepAlive)
					}
				}
			case windlass.EventFinished:
				if ev.Result != nil {
					return resultOf(*ev.Result), nil
				}
			}
		case <-tick:
			progress.send(ctx, 0, progressMessage(state, id))
			keepAlive.Reset(h.cfg.KeepAlive)
		case <-waitCtx.Done():
			return nil, nil
		}
	}
}

// progressMessage is the message of a notification that says what a call
// is waiting for.
func progressMessage(state, id string) string { return fmt.Sprintf("%s (call id %s)", state, id) }

// announce tells the client the call's id as soon as the fleet accepted
// it, in a log message (notifications/message, level info, data with
// call_id, tool and message): a client without a progress token learns it
// too. The SDK sends it only to a client that set a log level
// (logging/setLevel) of info or lower.
func (h *Handler) announce(ctx context.Context, ss *mcp.ServerSession, id, tool, state string) {
	if ss == nil {
		return
	}
	//lint:ignore SA1019 MCP logging is deprecated as of protocol 2026-07-28, functional during the deprecation window, and the one notification a client without a progress token can read.
	_ = ss.Log(ctx, &mcp.LoggingMessageParams{Meta: mcp.Meta{MetaCallID: id}, Level: "info", Logger: h.cfg.Name, Data: map[string]any{
		"call_id": id, "tool": tool, "message": fmt.Sprintf("The fleet accepted the call to %q (call id %s): %s.", tool, id, state),
	}})
}

// resultOf turns a fleet result into an MCP tool result: the content as
// text, isError for a failure (with its code in _meta), and a JSON object
// value as structuredContent.
func resultOf(r windlass.ToolResult) *mcp.CallToolResult {
	if r.IsError {
		return withRetryAfter(errorResult(r.CallID, r.Code(), r.Content), r.Error)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: r.Content}}, Meta: mcp.Meta{MetaCallID: r.CallID}}
	if data := bytes.TrimSpace(r.Data); len(data) > 0 && data[0] == '{' {
		res.StructuredContent = json.RawMessage(data)
	}
	return res
}

// errorResult is a tool error the model can read.
func errorResult(callID string, code windlass.ErrorCode, text string) *mcp.CallToolResult {
	meta := mcp.Meta{MetaErrorCode: string(code)}
	if callID != "" {
		meta[MetaCallID] = callID
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true, Meta: meta}
}

// withRetryAfter adds ce's retry-after, when it has one, to res's _meta
// (MetaRetryAfterMS).
func withRetryAfter(res *mcp.CallToolResult, ce *windlass.CallError) *mcp.CallToolResult {
	if ce != nil && ce.RetryAfterMS > 0 {
		res.Meta[MetaRetryAfterMS] = ce.RetryAfterMS
	}
	return res
}

// progressStep is what a notification that reports no new fraction (the
// first one, a keepalive, a tool's new message at the same fraction) adds
// to the progress value last sent: MCP requires each progress
// notification's progress to be greater than the previous one's.
const progressStep = 1e-6

// progressSender sends a call's progress notifications to a client that
// asked for them with a progress token. Their progress (of total 1) only
// grows: a tool's report is sent as its fraction, or the last value plus
// progressStep when that is more; every other notification adds
// progressStep. Each carries the call id in its _meta.
type progressSender struct {
	session *mcp.ServerSession
	token   any
	callID  string

	sent bool
	last float64 // progress last sent

	reported        bool
	fraction        float64 // the tool's report last sent
	reportedMessage string
}

// wanted reports whether the client asked for progress notifications.
func (p *progressSender) wanted() bool { return p.token != nil && p.session != nil }

// send sends one notification; false when the client asked for none.
func (p *progressSender) send(ctx context.Context, progress float64, message string) bool {
	if !p.wanted() {
		return false
	}
	if p.sent {
		progress = max(progress, p.last+progressStep)
	}
	p.sent, p.last = true, progress
	_ = p.session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{Meta: mcp.Meta{MetaCallID: p.callID},
		ProgressToken: p.token, Progress: progress, Total: 1, Message: message})
	return true
}

// report sends a report of the tool, unless it repeats the last one (the
// fleet repeats the latest report at each of the worker's heartbeats).
func (p *progressSender) report(ctx context.Context, fraction float64, message string) bool {
	if p.reported && fraction == p.fraction && message == p.reportedMessage {
		return false
	}
	p.reported, p.fraction, p.reportedMessage = true, fraction, message
	return p.send(ctx, fraction, message)
}

// requestTrace returns ctx with the trace context (traceparent, tracestate,
// baggage) of the tools/call's own HTTP request and no other, so that the
// call's spans join the trace of the request that asked for it. The SDK
// runs a session's calls under the context of the request that opened the
// session, whose trace is not this call's. A call that did not come over
// HTTP keeps ctx as it is.
func requestTrace(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req.Extra == nil || req.Extra.Header == nil {
		return ctx
	}
	ctx = trace.ContextWithSpanContext(baggage.ContextWithoutBaggage(ctx), trace.SpanContext{})
	return telemetry.ExtractHTTP(ctx, req.Extra.Header)
}
