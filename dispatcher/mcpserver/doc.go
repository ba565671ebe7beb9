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
// tools/call submits the call to the fleet (a new call id per request) and
// follows it until its result:
//   - a progress report of the running tool becomes
//     notifications/progress (progress = fraction, total = 1, and the
//     tool's message) when the client sent a progress token; reports that
//     do not advance the fraction are skipped, as MCP requires progress to
//     increase;
//   - a client's cancellation (notifications/cancelled) cancels the call in
//     the fleet (dispatcher Cancel), so a queued call never runs and a
//     running one sees its context end;
//   - a call of a gated tool waits for a person's approval in the approval
//     service, bounded by Config.ApprovalWait;
//   - a failed result (a tool error, a refusal such as invalid_arguments or
//     no_worker, a timeout, a rejection) is an MCP tool result with isError
//     and the error text, never a protocol error, so the model can read it
//     and recover; its code is in _meta["dev.windlass/error_code"];
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
// header). Calls themselves are the fleet's, so a replica's restart loses
// no call, only the client's wait for it. Idle sessions are closed after
// Config.SessionTimeout.
package mcpserver
