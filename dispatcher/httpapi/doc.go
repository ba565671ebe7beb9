// Package httpapi is the HTTP API of a dispatcher, what `windlass
// dispatcher` serves: agent backends in any language list the fleet's tools
// and call them without a Go client. It holds no state, so any number of
// replicas can serve one fleet; a call submitted on one is looked up,
// waited for, canceled or followed on any other.
//
//	GET    /v1/tools?style=openai|anthropic|gemini  the live tools, in the provider's format
//	POST   /v1/calls                                submit a call; wait for its result, or not
//	GET    /v1/calls/{id}                           where a call stands; its result once finished
//	DELETE /v1/calls/{id}?reason=TEXT               cancel it
//	GET    /v1/calls/{id}/events                    its events, as server-sent events
//	GET    /v1/openapi.json                         the OpenAPI 3.1 document of all this
//	GET    /healthz, /readyz                        probes: the process; NATS and the registry
//
// POST /v1/calls takes {"tool", "arguments", "id"?, "timeout_ms"?,
// "metadata"?, "async"?, "wait_ms"?, "spec_hash"?, "style"?}. It waits for the result at most the
// smallest of wait_ms, [Config.MaxWait] (60 s) and timeout_ms, and answers
// 200 with the finished call; past that bound, or at once with "async":
// true, it answers 202 with the call's URL in Location, to poll or follow.
// timeout_ms and wait_ms are at most [MaxDurationMS] (about 292 years, the
// longest time.Duration); more is refused 400, never taken as another
// deadline. A caller's own id makes the submit idempotent: the same id is the same
// call, run once. A spec_hash (from GET /v1/tools, "spec_hashes") pins
// the call to the tool's spec the model saw: a stale one is refused 409
// spec_mismatch before the call is queued, with the tool's current
// definition in the request's style ("tool") and its hash ("spec_hash").
//
// A tool's failure is a result, not an HTTP error: 200, with "is_error"
// and the result's code. A call refused before it is queued, and a request
// the API cannot take, get {"error":{"code","message"}} with the codes of
// the fleet's results where one applies, mapped to HTTP statuses in one
// table ([HTTPStatus]): invalid_call (bad JSON, unknown field, bad id) and
// invalid_request (a query parameter) 400, unauthorized 401, unknown_tool
// and unknown_call 404, request_timeout 408 (a body that did not arrive
// within [Config.BodyTimeout]), call_finished (with the result), id_conflict and
// spec_mismatch 409, payload_too_large 413, unsupported_media_type 415,
// invalid_arguments 422, too_many_streams, rate_limited and overloaded
// 429, no_worker and unavailable 503. The codes worth simply trying again
// carry a Retry-After: unavailable (2 s), too_many_streams (1 s), and
// rate_limited and overloaded (a call refused by a limit or a full
// queue, never queued): the refusal's own retry-after, which the body's
// error carries as retry_after_ms, in whole seconds rounded up, at
// least 1.
//
// A call is unknown_call only when the fleet knows it does not exist: its
// results and events streams answered and neither holds it. While they
// cannot be read (NATS down or restarting, a stream not recovered yet),
// GET, DELETE and the events of a call answer 503 unavailable, never 404,
// so a client does not take an accepted call for lost. A DELETE whose
// cancellation was stored but whose canceled result could not be is 202
// with the call's URL, not 503: the call is canceled, and its URL shows
// the result once the call's worker (or the approval service) stores it.
//
// Each event stream holds a consumer and a subscription on the NATS
// server, deleted when the stream ends (the call finished, the client
// left, the server drains). Streams open at once are bounded per API key
// ([Config.MaxStreamsPerKey], 100) and per process ([Config.MaxStreams],
// 1000); one more is answered 429 too_many_streams.
//
// Requests present an API key as "Authorization: Bearer <key>". The
// handler is configured with the keys' SHA-256 hashes only and compares in
// constant time; with no keys configured every request is let in, and
// [New] logs a warning. The probes and the OpenAPI document need no key.
// Bodies are bounded ([Config.MaxBodyBytes]) and decoded strictly: one
// JSON object, sent as application/json (which a browser's cross-site form
// cannot send), with exact (case-sensitive) field names, none unknown and
// none given twice, and valid UTF-8 throughout, no lone surrogate escape
// ("\ud800"), the arguments included (a 400 invalid_call names the field
// and the rule), so that what a proxy or an auditor reads in a body is
// what the fleet does. The Go API and the MCP server take arguments with a
// name given twice (the last counts) and a lone surrogate (as U+FFFD), as
// encoding/json does. A call request's body is read whole and its JSON
// values counted (see [dispatcher.Dispatcher.MaxArgumentValues]) before
// it is decoded: a body both malformed and over a limit (its size, its
// time) is answered for the limit.
//
// [Config.Extra] mounts more handlers on the same server, behind the same
// key check, such as an MCP endpoint at /mcp.
package httpapi
