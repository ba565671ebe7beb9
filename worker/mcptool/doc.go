// Package mcptool serves the tools of remote MCP servers as fleet tools: a
// [Bridge] connects to each server (streamable HTTP, the official Go SDK),
// lists its tools and runs a fleet worker that advertises them in the
// registry with their schemas and forwards every call to the server. To an
// agent, a remote MCP tool and a local Go function are the same
// windlass.Tool. From the command line: windlass worker --mcp URL.
//
// # Names
//
// A fleet tool name must match ^[a-zA-Z0-9_-]{1,64}$; MCP allows more. A
// remote name is given the server's prefix (Server.Prefix, none by
// default), every other character is replaced by '_', and it is cut to 64
// characters; a name already taken in this bridge (by another server's
// tool, or listed in Config.Reserved) gets a suffix "_2", "_3", …. A tool
// keeps its name for as long as its server lists it. [Bridge.Mapping]
// returns the mapping, and every new entry is logged ("mcptool: tool
// mapped", with url, remote and tool). Names are unique within a bridge;
// across the fleet, give each server a prefix.
//
// # Calls
//
// Arguments pass through unchanged (after the fleet has checked them
// against the remote schema). A result with isError becomes a tool_error
// result with the text; structuredContent becomes the result's value (its
// data), otherwise the text content is the value. A call made while the
// server is unreachable waits for the reconnection within its own deadline.
// A call whose connection broke after it was sent (also when the SDK
// reports the lost answer as "rejected by transport") may have run there:
// it is sent again (the worker retries it, on a new session) only when the
// remote tool says that changes nothing — its annotations mark it
// read-only or idempotent — or when the server certainly did not take it:
// the call's own request was never written to a connection (a refused
// dial, as net/http's own transport reports it: through a
// Config.HTTPClient whose transport wraps or replaces it, any failure is
// taken for "may have run"), or was answered 404 (the session unknown
// there) or 429.
// Otherwise its caller is told unavailable, that the call may have run,
// and it is not sent again: a tool does not run twice because its answer
// was lost on the way. (A worker lost mid-call still has its calls
// redelivered, and Worker.Retry may retry a call that timed out, for any
// tool.)
//
// # Changes: one worker per tool set
//
// A worker.Worker registers its tools before it runs, so the bridge runs
// one worker per version of the tool set (a "generation", worker id
// "<Config.Worker.ID or mcp-random>-g<n>"). When a server sends
// notifications/tools/list_changed, or a reconnection lists other tools,
// the bridge starts a worker for the new set (with Replace, so a changed
// schema takes over its name in the registry), waits until the registry
// lists it, then stops the previous one, which finishes its running calls
// and withdraws. The tools' durable consumers are shared, so no queued
// call is lost in the hand-over; a call the server hands to the retiring
// worker's last pull request as it stops is redelivered after the ack wait
// (worker.Config.AckWait), so it may be that much late.
//
// # Reconnection
//
// A lost session (the server restarted, the network failed) is reopened
// with exponential backoff (Config.MinBackoff to Config.MaxBackoff) for as
// long as the bridge runs. Meanwhile the tools stay advertised as they were
// last listed, and their calls wait for the server.
package mcptool
