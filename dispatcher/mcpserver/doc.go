// Package mcpserver serves the fleet's tools over the Model Context
// Protocol (streamable HTTP, the official Go SDK), so that any MCP client —
// an agent backend in Python, TypeScript or Go, a desktop assistant — lists
// and calls fleet tools without a windlass client.
//
// A [Handler] is an http.Handler; mount it at "/mcp" beside the dispatcher's
// HTTP API (httpapi.Config.Extra) or on any mux:
//
//	h, err := mcpserver.New(ctx, mcpserver.Config{Dispatcher: d})
//	defer h.Close()
//	mux.Handle("/mcp", h)
//
// # Tools
//
// tools/list is the dispatcher's catalog: every tool with a live worker,
// its input schema the tool's JSON Schema. The handler follows the
// dispatcher's view of the registry; when tools come or go, or a spec
// changes, connected clients get notifications/tools/list_changed.
//
// tools/call submits the call to the fleet and follows it until its
// result:
//   - the call id is the one the request's _meta names under
//     "dev.windlass/call_id" ([MetaCallID]), such as the model's tool-call
//     id, else a new one. The fleet deduplicates by call id, so a request
//     repeating an id, from any session, is the same call, run once: a
//     retry after a lost connection or a restart (see Sessions) waits for
//     the call and gets its answer. A request that timed out is another
//     matter: the MCP SDKs' clients send notifications/cancelled when it
//     does (the go-sdk when the request's context ends, the TypeScript SDK
//     at its request timeout), which cancels the call (see below), so a
//     retry after it gets the canceled result (the call's own, if it
//     finished first) — unless the retry was already waiting for the
//     call, for which it goes on. A client that must wait longer sets a
//     longer timeout, or resets it on progress (the keepalives below). An
//     invalid id is refused (isError, code invalid_call);
//   - the client learns the call id at once, before any result: in the
//     _meta (and the message) of the first progress notification, sent as
//     soon as the fleet accepted the call, when the request has a progress
//     token; and in a log message (notifications/message, level info, data
//     with call_id and tool), which the SDK sends to a client that set a log
//     level of info or lower (logging/setLevel). The result carries it in
//     its _meta too;
//   - progress notifications (when the client sent a progress token) carry
//     the call id in their _meta: the running tool's reports (progress =
//     fraction, total = 1, the tool's message), and, whenever none was sent
//     for Config.KeepAlive (default 10s) while the call is held for
//     approval, queued or running, a keepalive whose message says what the
//     call waits for ("waiting for a person's approval (call id …)"), so
//     that a client that resets its request timeout on progress keeps
//     waiting. MCP requires progress to increase: a notification that does
//     not report a new fraction (the first, a keepalive, a new message at
//     the same fraction) sends the last value plus one millionth, which no
//     progress bar shows. The value may thus pass 1 by a few millionths
//     when a tool that reported completion keeps running;
//   - a client's cancellation (notifications/cancelled) cancels the call in
//     the fleet (dispatcher Cancel), so a queued call never runs and a
//     running one sees its context end — unless another request waits for
//     the same call id, for which the call goes on;
//   - a call of a gated tool waits for a person's approval in the approval
//     service, bounded by Config.ApprovalWait;
//   - a failed result (a tool error, a refusal such as invalid_arguments or
//     no_worker, a timeout, a rejection) is an MCP tool result with isError
//     and the error text, never a protocol error, so the model can read it
//     and recover; its code is in _meta["dev.windlass/error_code"], and
//     for a refusal by a limit or a full queue (rate_limited, overloaded:
//     the call was not queued) the milliseconds to wait before calling
//     again in _meta["dev.windlass/retry_after_ms"];
//   - a result whose value (ToolResult.Data) is a JSON object is sent as
//     structuredContent beside the text content. Other values (strings,
//     numbers, arrays) are sent as text only: structured content is an
//     object for clients of MCP versions before 2026-07-28.
//
// # Annotations, and requires_approval as the authority
//
// A tool's risk hints ([windlass.ToolHints]) become its MCP annotations
// (readOnlyHint, destructiveHint, idempotentHint, openWorldHint); a tool
// without hints has none, and clients assume the MCP defaults (not
// read-only, destructive, open world). requires_approval overrides the
// hints: a gated tool is always advertised with readOnlyHint false and
// destructiveHint true, whatever its author stated, because a client may
// auto-approve tools that look harmless, and a human gate must never look
// like one. See [Annotations].
//
// # Sessions
//
// MCP sessions (and the stream that carries list-changed notifications)
// live in the process that created them: behind a load balancer, route a
// session's requests to one replica (affinity on the Mcp-Session-Id
// header). Calls themselves are the fleet's, so a replica's restart (or
// [Handler.Close]) loses no call, only the client's wait for it: Close
// answers each waiting request before it closes the sessions (isError,
// code unavailable: the server is shutting down, the call goes on, with
// its id), and a request with that call id to another replica waits for
// the call again.
//
// A caller that goes away does not leave a live call behind. When a
// session ends, every call it waits for is canceled in the fleet (a held
// call leaves the approval dashboard, and approval.canceled fires; a
// queued one never runs; a running one sees its context end), with a
// reason that says so:
//   - "the MCP session ended: deleted by the client": the client ended the
//     session (HTTP DELETE). The calls are canceled before the DELETE is
//     answered;
//   - "the MCP session ended: expired after 2m0s idle": the session was
//     idle for Config.SessionTimeout (default 2m) — no request of it open
//     and none made. A client waiting for a call keeps its request open,
//     and a connected client its notification stream (GET), so neither is
//     idle; a client that is gone (its process died, it timed out and
//     exited without a cancellation) closed its connections, and its
//     session expires SessionTimeout later.
//
// The one exception: a call that a request of another session waits for
// too (a retry with the same call id, from a client that restarted) goes
// on for that one.
//
// The handler decides this itself because the SDK (go-sdk v1.8.0) does
// not: its ServerSession.Close, which ends a DELETE and its own idle
// timeout, waits for the tool calls in progress and cancels none; and a
// POST whose connection drops leaves its tool call running (a stream
// without an event store cannot be resumed, but the SDK does not cancel
// it). A dropped POST alone is not taken as the client's end either: the
// client may be alive and retry with the same call id, which joins the
// call; the session's idle timeout is the authority. So the handler keeps
// its own record of each session (named through ServerOptions.GetSessionID,
// so none is missed), counts its requests in progress, and runs the idle
// timeout in place of the SDK's.
package mcpserver
