// Package approval is the service that holds the calls of gated tools
// (Spec.RequiresApproval) until people decide, and tells an approval
// dashboard by signed webhook.
//
// # Flow
//
// A dispatcher publishes a gated call on windlass.approval.<tool> (the
// approvals stream). The [Service] consumes it with one durable consumer
// ([ConsumerName]), persists it in Redis and only then acks it, so a restart
// loses no call; a redelivery finds it held and is acked again. Reviewers
// decide through the HTTP API ([Service.Handler]) or the reference dashboard
// it serves. On approval the service signs a release (package
// approval/release) and publishes the call, with the approved arguments, on
// its tool's subject, deduplicated by call id; the execution deadline starts
// at release (the tool's timeout plus Config.QueueAllowance, capped by the
// caller's own deadline, after which nobody waits). A rejection or
// a lapsed window answers the caller with a rejected (naming the reviewer
// and the reason) or expired result. Workers run a gated call only with a
// valid release.
//
// A caller may cancel a held call (dispatcher Cancel records the
// cancellation in the cancels stream). The service follows that stream and
// marks a pending call canceled: it leaves the pending set, the audit log
// records it, its caller is answered canceled, and it is never released;
// a decision on it gets a *[DecidedError] (409) like any decided call. A
// decision, and the intake of a call, first look the call up in the
// cancels stream itself, so a cancellation the follower has not applied yet
// (or recorded before the call reached the service) still wins. A call
// canceled after its approval is left approved: the worker that pulls it
// answers it canceled without running it.
//
// # Rules
//
//   - A decision happens once: the transition from pending is one Lua
//     script, so of two reviewers clicking at once one wins and the other
//     gets a *[DecidedError] (HTTP 409) with the first decision.
//   - An approval quotes the arguments hash it saw ([HeldCall.ArgsHash]); any
//     other is refused ([ErrArgsMismatch], 412). A reviewer may approve with
//     edited arguments: they are validated against the tool's schema (422 if
//     they do not fit), restart the approvals, and the audit log keeps both
//     versions.
//   - [ToolPolicy] sets per tool the window, how many distinct reviewers must
//     approve, and whether the requester (metadata "requester") may approve
//     their own call.
//   - [ToolPolicy].ReviewerGroups names the reviewer groups
//     ([Reviewer].Groups) that may see and decide a tool's calls; others get
//     [ErrNotAllowed] (403) and do not see the calls in lists or the audit
//     log. A held call keeps its policy's groups ([HeldCall].ReviewerGroups).
//   - A rejection may say "do not retry" ([NoRetry]); the caller's result
//     tells the model so ([RejectedMessage], [ExpiredMessage]).
//   - Reviewers authenticate with bearer tokens the service stores as SHA-256
//     hashes and compares in constant time; every decision records who made
//     it.
//   - A crash between a decision and its release is repaired when the
//     service starts again (approved calls not yet released are released;
//     the calls stream drops a second publish of the same call id).
//
// # Replicas
//
// Any number of replicas may run on one NATS and one Redis; they keep
// nothing of their own. They share the approvals consumer (each gated call
// is taken in by one), follow the cancels stream each (applying a
// cancellation twice is a no-op), answer the HTTP API from Redis, rate-limit
// each reviewer's decisions together (5 a second, bursts of 20, in Redis
// through github.com/go-redis/redis_rate), expire and release from indexes
// (the pending set by expiry, the unreleased set by approval: a pass costs
// the work due, not the history), answer again from an index the callers
// of calls decided against whose answers a failure left unstored (the
// unanswered set: a Redis read or a publish failed after the decision, or
// the process died between), and deliver each notification once (see
// below).
//
// # Retention
//
// A decided call (approved, rejected, expired, canceled) is deleted
// Config.Retention (default 30 days) after its decision, and the audit log
// and the webhook log are trimmed to the same age (XTRIM MINID): every
// replica deletes what is past it every quarter of the retention, at most
// a minute apart. Export the audit log before it is trimmed: GET
// /v1/audit?since=RFC3339 (pages: after=<the last entry's id>), or
// windlass approvals audit --since 720h, which prints one JSON object a
// line: id (the stream entry id, time-ordered), time, event, call_id,
// actor, fields (reason; before and after for an edit). A webhook event
// not delivered within the retention (an endpoint down for that long) is
// lost with its entry.
//
// # Redis layout
//
// Keys under Config.Prefix (default "windlass:approval:"; <p> below). A held
// call's state, the indexes and the audit stream share one Redis Cluster
// hash slot, the tag {index}, because a transition (hold, decision, expiry,
// cancellation, release) changes the call's state, moves it between
// indexes and appends its audit entry in one Lua script: atomic, so that a
// decision happens once and the audit log holds exactly what happened. What
// is large — the call message and its arguments — is in a key of its own,
// tagged by the call id, so it shards across a cluster's masters:
//
//	<p>call:{<id>}               HASH  the call's bulk: call (the message), args, metadata,
//	                                   args_ref, args_preview, intake_args_hash (of the
//	                                   message held: another of the id is not it),
//	                                   intake_seq (its approvals-stream sequence: its own
//	                                   redelivery is not another message); written
//	                                   once; expires with the window plus
//	                                   the retention (deleted with the call before that)
//	<p>claim:{<id>}              STRING the approvals-stream sequence of the message
//	                                   that took the id without holding it: one waiting
//	                                   for its tool's bound on argument values (expires
//	                                   an hour after the wait: its last delivery comes
//	                                   after it), one refused and answered (an
//	                                   hour; "<seq> <code>": not even its own
//	                                   redelivery is held, it is answered again);
//	                                   set only while no body is, and no body is
//	                                   written for another message while it is (one Lua
//	                                   script each, on the id's slot)
//	<p>{index}:call:<id>         HASH  its state: args_hash, approved_args, tool, spec_hash,
//	                                   requester, origin, requested_ms, expires_ms, required,
//	                                   forbid_self, status, approvers, rejected_by, reason,
//	                                   decided_ms, released, traceparent, reviewer_groups,
//	                                   no_retry, audit_ids (the ids of its audit entries:
//	                                   its history's index)
//	<p>{index}:pending           ZSET  pending ids by expiry (unix ms)
//	<p>{index}:status:<status>   ZSET  ids by request time (pending) or decision time
//	                                   (the others: the retention trims by it)
//	<p>{index}:unreleased        ZSET  approved ids not released yet, by approval time
//	<p>{index}:unanswered        ZSET  rejected, expired or canceled ids whose caller's
//	                                   answer is not known to be stored, by decision time
//	<p>{index}:audit             STREAM requested, approval, edited, approved, rejected,
//	                                   expired, canceled, released (actor, reason,
//	                                   before/after); consumer groups "notify" and
//	                                   "webhook:<16 hex of the SHA-256 of the URL>"
//	<p>webhooks                  STREAM every webhook delivery attempt (its own slot)
//	rate:<p>reviewer:<name>      STRING a reviewer's decision rate (redis_rate's key)
//
// The one slot's size is bounded by the retention: about 800 bytes per
// call (measured with MEMORY USAGE for a small call approved and released:
// state 440, audit entries 207, status set entry 135; more with an edit,
// whose arguments the state and the audit entry keep), times the calls
// decided in a retention period: about 24 MB for 1,000 calls a day over 30
// days. (Measured before the state kept audit_ids, which adds each entry's
// id, about 16 characters, per audit entry.) A prefix that holds a
// hash tag of its own ("{windlass}:approval:") puts every key in that one
// slot instead; it works, without sharding.
//
// # Notifications
//
// Config.Notify and each endpoint of Config.Webhooks have a queue of their
// own: a consumer group on the audit stream, so one slow endpoint holds
// back no other. A replica creates the groups before it appends any event
// (before it takes a call in, and before a decision), and records the
// queues beside the stream: a queue new to a deployment starts at the
// stream's end (a new endpoint is sent the events from then on, not the
// history); a group Redis lost (restarted empty, with the record) starts
// at the stream's beginning, since every entry there came after the loss.
// A deployment from before the record counts as one that lost it: an
// endpoint added at that upgrade is sent the retained history once. Every replica reads each queue as a consumer of its own
// (Config.Replica), one entry at a time, and acknowledges an entry only
// after the delivery succeeded (or the sender gave up on it): so each event
// is delivered by one replica while all live. While it delivers, a replica
// renews its claim on the entry every third of Config.ClaimAfter (default
// 30 s); an entry whose replica died mid-delivery is claimed by another
// (XAUTOCLAIM) once ClaimAfter has passed and delivered again — the only
// case of a duplicate, which receivers drop by its webhook-id (derived
// from the audit entry: the same on every retry, replica and endpoint).
// Events of one queue arrive in order from one replica; with several, in
// the order the replicas finish them (order by the data's event_id, the
// audit entry id, when it matters). A replica's consumer with nothing
// pending is removed after an hour unseen.
//
// The webhooks are approval.requested, approval.approved,
// approval.undeliverable, approval.rejected, approval.expired and
// approval.canceled, per the Standard Webhooks specification (package
// approval/webhook); approval.approved is sent once the approved call was
// released, approval.undeliverable when it never could be (its caller
// answered instead: HeldCall.Undeliverable).
package approval
