// Package registry is the fleet's Redis registry of tools and live workers.
//
// A worker advertises its tools with [Registry.Advertise], which returns a
// [Lease] that heartbeats in the background until [Lease.Withdraw]. A
// dispatcher keeps an in-memory [View] with [Registry.Watch]: it follows
// changes announced on a pub/sub channel at once and resynchronises on a
// timer, so it never asks Redis on the path of a call.
//
// # Redis layout
//
// Every key starts with Config.Prefix (default "windlass:"; use a hash tag
// such as "{windlass}:" on Redis Cluster, since changes touch several keys
// atomically in one Lua script):
//
//	<prefix>tools                  SET   names of every tool ever advertised
//	<prefix>tool:<name>            HASH  spec (JSON), hash (Spec.Hash), updated_ms,
//	                                     rate (execution rate, "10/s burst 5"; absent: none)
//	<prefix>tool:<name>:workers    ZSET  worker id -> lease expiry (unix ms)
//	<prefix>worker:<id>            HASH  tools, host, pid, started_ms; PEXPIRE = TTL
//	<prefix>changes                pub/sub channel: the name of a tool that changed
//
// A worker is live for a tool while its score in the tool's ZSET is in the
// future. Liveness is advice for routing only: redelivery of calls is driven
// by JetStream, never by a key expiring.
//
// # Schema conflicts
//
// A worker whose spec for a tool differs from the one the tool's live
// workers advertise is refused with a [*ConflictError] naming the other
// workers and both hashes, unless it advertises with Replace (a rolling
// upgrade), which makes its spec the tool's spec. A worker already holding a
// lease only renews it: a heartbeat never changes the spec.
//
// # Execution rates
//
// A worker advertises each tool's execution rate (the worker's WithRate)
// beside its spec, outside it: the rate is not part of the spec's hash, so
// workers declaring different rates serve the same tool. The tool's hash
// keeps the rate of the worker that took its lease last; one whose rate
// differs from what the tool's live workers advertise is logged as a
// warning, not refused. Each worker enforces the rate it declared itself,
// on the tool's one shared count (package limits), so while they differ
// the tool starts calls at a pace between the two.
//
// # Defaults
//
// TTL 10s, heartbeat every TTL/3, view resync every second. When Redis is
// unreachable a lease keeps retrying with exponential backoff and
// re-advertises once Redis is back; a view keeps serving what it last saw,
// judging liveness as of its last successful sync, and reports how stale it
// is with [View.Staleness].
package registry
