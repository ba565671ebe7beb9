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
//   - Reviewers authenticate with bearer tokens the service stores as SHA-256
//     hashes and compares in constant time; every decision records who made
//     it.
//   - A crash between a decision and its release is repaired when the
//     service starts again (approved calls not yet released are released;
//     the calls stream drops a second publish of the same call id).
//
// # Redis layout
//
// Keys under Config.Prefix (default "windlass:approval:"):
//
//	<p>call:<id>          HASH  the call, args, args_hash, approved_args, tool, spec_hash,
//	                            requester, metadata, origin, requested_ms, expires_ms,
//	                            required, forbid_self, status, approvers, rejected_by,
//	                            reason, decided_ms, released
//	<p>pending            ZSET  pending ids by expiry (unix ms)
//	<p>status:<status>    ZSET  ids by request time, one set per status
//	<p>audit              STREAM append-only: requested, approval, edited, approved,
//	                            rejected, expired, canceled, released (actor, reason,
//	                            before/after)
//	<p>webhooks           STREAM every webhook delivery attempt
//
// # Notifications
//
// Config.Notify receives every audit event in order, at least once, through a
// consumer group on the audit stream: an event is acknowledged only after
// Notify returns nil, so events survive a restart. [WebhookNotifier] posts
// approval.requested, approval.approved, approval.rejected,
// approval.expired and approval.canceled per the Standard Webhooks specification (package
// approval/webhook), with a webhook-id derived from the audit entry;
// approval.approved is sent once the approved call was released.
package approval
