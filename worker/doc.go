// Package worker runs a process's pool of tools for the fleet: it pulls the
// calls of its tools from JetStream, runs each through
// [windlass.InvokeAsync] under its deadline, publishes the result durably
// and only then acks the call, and advertises its tools in the registry
// while it runs.
//
// # Consumers and capacity
//
// Every tool has one durable pull consumer on the calls stream
// (layout.ConsumerName: "tool-<name>"), shared by every worker of the tool:
// starting another worker adds capacity. Concurrency is bounded per tool
// ([WithConcurrency]) and per process (Config.MaxConcurrency), and a worker
// pulls only as many calls as it has free slots: a call never waits in a
// client-side buffer, where its ack timer would run out unwatched.
//
// The consumer's settings are decided once, by the worker that creates it:
// a worker finds the consumer, or creates it (create only) when it is
// missing. It never rewrites the ack wait, max ack pending or max deliver
// of an existing consumer; for each of its own that differs it logs a
// warning with the setting, the existing value and its own, and keeps the
// existing one. When the consumer's ack wait is shorter than the worker's
// Config.AckWait, the worker sends in-progress acks (and heartbeats) by the
// consumer's, so a running call is not redelivered for it. Only the filter
// subjects are updated on an existing consumer, when the calls stream asks
// for others (a stream migrated from protocol 1). Config.UpdateConsumer
// rewrites the consumer with the worker's settings, to change them on
// purpose (the CLI's --update-consumer).
//
// # Execution rates
//
// A tool that calls a rate-limited API declares the rate ([WithRate]; it
// needs Config.Registry): the workers of the tool across the fleet start
// at most that many calls per period, with the burst, on one count shared
// in the registry's Redis (package limits, GCRA through redis_rate), and
// the registry advertises the rate. A call waits for its turn after the
// intake's checks and before its tool starts, on a goroutine of its own
// (no handler), holding its slot; its heartbeat's in-progress acks keep
// its message, so it stays queued however long it waits. It is never
// refused or failed for the rate: its deadline passing answers it timeout
// (the tool not run), a cancellation answers it canceled, and the
// worker's shutdown hands it back unanswered. Its start (the started
// event, ToolResult.StartedAt, the queue wait) is taken when its turn
// comes. While Redis cannot be asked the rate fails closed: the call
// waits, asking again with backoff, and the worker warns (at most every
// ten seconds per tool). Workers of a tool that declare different rates
// each enforce their own on the shared count; the registry warns of it.
//
// # Deadlines
//
// Three bounds, in the taxonomy of durable-execution systems:
//   - schedule-to-close: the call's Deadline, set by the caller; a call
//     already past it when pulled is answered timeout without running;
//   - start-to-close: the tool's Spec.Timeout, per attempt;
//   - schedule-to-start: an optional bound on time spent queued
//     ([WithMaxQueueWait]); a call that waited longer is answered timeout.
//
// The tool's context ends at the earlier of the first two. While a call runs
// the worker sends in-progress acks every AckWait/3, so a long call is not
// redelivered while its worker lives. When they come late all the same (a
// loaded host, a long pause) and JetStream hands the call back to the
// worker still holding it, the worker leaves that delivery alone: the
// delivery it holds settles the message, and the tool does not run beside
// itself. Left deliveries count as attempts. When they could not reach the
// server at all for an ack wait (an outage) and the call is redelivered to
// another worker, that worker waits for the holder's answer if it has just
// reconnected itself, and then asks the tool's workers whether one still
// holds the message (core NATS, windlass.held.<tool>): a holder back on its
// connection, its tool still running, answers, and the delivery is left to
// it too.
//
// # Acks
//
// Every delivered call ends in one outcome, decided in one place and
// applied in one place. The intake's guards (malformed, refused, already
// answered, out of deliveries, spec or deadline refusal, canceled before it
// started) decide it for a call that must not run; decide does for a call
// whose tool answered (answer and ack, answer and terminate, retry after a
// delay, hand back, record as dead). One function, apply, carries it out:
// a result (success or error) is published to the results stream and only
// once the stream has acknowledged it is the call acked — the worker's
// result pipe publishes results asynchronously, at most 1,024 on their way
// at once, and one drainer acks each call as its result's acknowledgement
// comes, so a call's slot is free for the next call while its result is
// stored; a malformed message is answered when its id can be read and
// terminated; a call interrupted by shutdown (its tool's context ended
// by it, the call answered canceled) is nacked so another worker runs
// it — a tool's own answer that came first stands; a refused message (a gated tool's call without a valid release,
// or any call on another call's subject) is recorded and terminated, with
// no result.
//
// # Gated tools
//
// A call of a tool that requires approval runs only when it carries a valid
// release from the approval service (see package approval/release):
// Config.Releases verifies its signature, call id, tool and the hash of the
// very arguments about to run, and the release ledger (a JetStream
// key-value bucket) makes it single-use; a first use of a release whose call
// already has a result is refused too. Anything else is dropped — terminated
// and recorded as a windlass.Refusal, never answered, since an answer under
// its call id would be whoever published it choosing what the real caller is
// told — and the worker fails closed, also when it has no keys. Only the
// message that holds the release is answered (timeout past the release's
// expiry, spec_mismatch, canceled) or run, and its result goes to the origin
// the release signs.
//
// # Execution receipts
//
// The result of every call that ran under a release carries the worker's
// signed execution receipt (package receipt), in its Windlass-Receipt
// header: the call, the tool, the spec hash, the arguments' canonical hash,
// the release's id and approvers, the SHA-256 of the stored body, the
// start and finish times, the worker id and its key id. Config.Receipts
// (or one tool's WithReceipts) set to ReceiptsAll signs every call's
// result. The receipt is signed over each body the result message gets: it
// counts towards the inline limit (a result that fits only without it goes
// by reference), and a result over the max payload is answered
// result_too_large, signed in its turn. The worker's key is
// Config.ReceiptKey, or one generated by New; Run publishes its public key
// in the registry before advertising (and fails to start when it cannot),
// again every hour and at its stop, to keep it Config.ReceiptKeyRetention
// (30 days) past the worker's end. No call reads or writes Redis for it.
//
// # Large payloads
//
// Arguments that came by reference are fetched, and checked against their
// size and SHA-256, just before the tool starts; a result whose message
// would be over Config.InlineLimit is stored in the fleet's object store
// and its message points at it (PROTOCOL.md, "Payloads by reference"). A
// result over the tool's limit (Config.PayloadLimit, [WithPayloadLimit])
// is answered result_too_large and the call acked: the tool did its work,
// and redelivering the call would only run it again.
//
// # Shutdown
//
// When the context given to [Worker.Run] ends, the worker stops pulling
// (calls it had pulled but not started are nacked for other workers), lets
// running calls finish within Config.ShutdownGrace, then cancels the rest
// (they are nacked and redelivered), and withdraws from the registry.
package worker
