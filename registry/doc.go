// Package registry is the fleet's Redis registry of tools and live workers.
//
// A worker advertises its tools with [Registry.Advertise], which returns a
// [Lease] that heartbeats in the background until [Lease.Withdraw]. A
// dispatcher keeps an in-memory [View] with [Registry.Watch], so it never
// asks Redis on the path of a call.
//
// # Redis layout
//
// Every key starts with Config.Prefix (default "windlass:"). A tool's keys
// share the hash tag {<name>}; the keys that span tools share the tag
// {registry}. So every script touches one Redis Cluster slot, and tools
// spread over the cluster's masters:
//
//	<prefix>tool:{<name>}            HASH  spec (JSON), hash (Spec.Hash), updated_ms,
//	                                       rate (execution rate, "10/s burst 5"; absent: none)
//	<prefix>tool:{<name>}:workers    ZSET  worker id -> lease expiry (unix ms)
//	<prefix>{registry}:tools         SET   names of every tool ever advertised
//	<prefix>{registry}:version       STRING a random token, replaced on every change
//	<prefix>{registry}:leases        ZSET  worker id -> lease expiry (unix ms): the lease index
//	<prefix>{registry}:worker:<id>   HASH  info (tools, host, pid, started_ms); PEXPIRE = TTL
//	<prefix>changes                  pub/sub channel: the new version token
//	<prefix>{registry}:receiptkey:<key id>
//	                                 HASH  key (base64 Ed25519 public key), published_ms,
//	                                       w:<worker id> (first published, unix ms) per
//	                                       worker; PEXPIRE = the retention (below)
//
// Do not put a hash tag in the prefix on a cluster: Redis hashes the first
// tag of a key, so "{windlass}:" puts every key in one slot (it works, but
// does not shard).
//
// The {registry} slot holds what spans tools, on one master: the tools set
// grows by one short member per tool name ever advertised (the fleet's
// catalogue: hundreds, not millions), the lease index and the worker
// hashes by one entry per live worker (an entry is dropped once its lease
// lapses). It takes one script per advertisement and heartbeat of a
// worker, and the views' checks (below). Nothing per call touches it.
//
// An advertisement runs one script per tool (in the tool's slot: drop
// lapsed leases, renew the worker's lease, or refuse a conflicting spec,
// or write the spec and take the lease), in two passes: the first renews
// and looks for conflicts, the second takes the tools only when no tool
// conflicts, so a refused advertisement takes nothing. Then one script in
// the {registry} slot records the worker's lease expiry in the index and,
// when a tool's keys changed (a lease taken or dropped, a spec or rate
// written), replaces the version token and announces it. An advertisement
// is therefore atomic per tool, not across its tools: a reader may see one
// tool taken before the next. Withdrawing removes the worker's leases from
// its tools, then its index entry, and replaces the version token.
//
// A worker is live for a tool while its lease on the tool is in the
// future. Liveness is advice for routing only: redelivery of calls is
// driven by JetStream, never by a key expiring.
//
// # Following changes
//
// A view checks the registry every Config.ResyncInterval (1 s), and at
// once when a change is announced: one round trip of two commands, GET of
// the version token and ZRANGE of the lease index. It rereads every tool
// (SMEMBERS, then HGETALL and ZRANGE per tool) only when the token moved.
// Lease renewals do not move it: a renewal writes the tool's lease and the
// index entry, and a view takes each worker's expiry from the index it
// reads each second, so a renewed lease stays live and a lapsed one (a
// dead worker) is seen lapsed at the first check after it lapsed, with no
// reread. With 100 tools a view issues about 2 commands a second where it
// issued about 201 (a full reread every second), plus one full reread
// (201 commands) every Config.FullResyncInterval (1 minute): 5.4 a second
// in all (README, "Registry reads", for the measurement).
//
// The token is written after the tools' keys, in a later script, so a view
// that sees a new token rereads data at least as new. A view records the
// token it read before its reread: a change committed during the reread
// moves the token again and is read at the next check. When the token's
// write is lost:
//   - Redis restarted empty: the token is gone, which is itself a change
//     (the view rereads and finds nothing; see "Defaults" for how it keeps
//     routing), and each worker's next heartbeat finds its leases gone,
//     takes them again and writes a new token. Tokens are random, never a
//     counter that could restart at a value a view already saw.
//   - The attempt failed between a tool's script and the token's write
//     (Redis unreachable): the lease remembers the unannounced change and
//     its next attempt writes the token even if it changes nothing itself.
//   - The master holding {registry} failed over before replicating the
//     token while another master kept the tool's change: nothing
//     remembers it. Config.FullResyncInterval bounds how long a view can
//     miss such a change; that is why the full reread stays.
//
// # Upgrading from the unsharded layout
//
// Releases before this layout wrote <prefix>tools, <prefix>tool:<name>,
// <prefix>tool:<name>:workers and <prefix>worker:<id>, in one script that
// fails with CROSSSLOT on a cluster. Dispatchers of those releases read
// only that layout, and dispatchers of this release read only the new one.
// So upgrade the workers first: a worker of this release also writes the
// old layout (first, with the old script, so a spec that conflicts with a
// worker of the old release is refused as before), and old dispatchers
// keep seeing it. Then upgrade the dispatchers and the CLI. Once no
// process of the old release runs, set Config.NoLegacyLayout on the
// workers. A dispatcher of this release started while workers of the old
// release still serve a tool does not see them: calls of a tool only they
// serve are refused unknown_tool until one of this release advertises it.
// The old layout is never written on a cluster under a prefix without a
// hash tag, where it cannot exist.
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
// # Receipt keys
//
// A worker that signs execution receipts (package receipt) publishes its
// public key with [Registry.PublishReceiptKey] when it starts and
// refreshes it while it runs; the key's hash expires a retention after the
// last refresh (default 30 days), not with the worker's lease, so a
// receipt verifies after its worker is gone ([Registry.ReceiptKey]). The
// key id is the key's hash, so a different key is never written under a
// published id. One key per worker start: a hash of about 200 bytes, a
// few thousand a month for a fleet that restarts often. Nothing per call
// reads or writes them.
//
// # Defaults
//
// TTL 10s, heartbeat every TTL/3, view check every second, full reread
// every minute. When Redis is unreachable a lease keeps retrying with
// exponential backoff and re-advertises once Redis is back; a view keeps
// serving what it last saw, judging liveness as of its last successful
// check, and reports how stale it is with [View.Staleness]. A tool that
// vanished from Redis (restarted empty) while its workers were live stays
// in the view, its workers live, for one TTL: time for their heartbeats to
// advertise it again.
package registry
