package windlass

import "time"

// EventKind names what happened to a call.
type EventKind string

// The kinds of [Event]. Queued, started, progress and retrying travel on the
// wire (PROTOCOL.md, "Events"); finished is the call's result as a watcher
// sees it.
const (
	// EventQueued: the fleet accepted the call (published by the dispatcher).
	EventQueued EventKind = "queued"
	// EventStarted: a worker began an attempt.
	EventStarted EventKind = "started"
	// EventProgress: the running tool reported progress.
	EventProgress EventKind = "progress"
	// EventRetrying: an attempt failed with a retryable error; another
	// follows at RetryAt.
	EventRetrying EventKind = "retrying"
	// EventFinished: the call has its result.
	EventFinished EventKind = "finished"
)

// Event is one step in a call's life, as watchers and status queries see it.
type Event struct {
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// Kind says what happened.
	Kind EventKind `json:"kind"`
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// Time is when it happened, by the publisher's clock.
	Time time.Time `json:"time"`
	// Attempt is the delivery attempt it concerns (started, progress,
	// retrying, finished).
	Attempt int `json:"attempt,omitempty"`
	// Worker is the worker running the attempt.
	Worker string `json:"worker,omitempty"`
	// Progress is the tool's latest report (progress).
	Progress *Progress `json:"progress,omitempty"`
	// Error is why the attempt failed (retrying).
	Error *CallError `json:"error,omitempty"`
	// RetryAt is when the next attempt may start (retrying).
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Deadline is the call's deadline (queued).
	Deadline time.Time `json:"deadline,omitzero"`
	// Key is the key the call is counted for by the fleet's limits (see
	// ToolCall.Key; absent: the shared default).
	Key string `json:"key,omitempty"`
	// Origin is the dispatcher instance that receives the result (queued).
	Origin string `json:"origin,omitempty"`
	// ArgsHash is the canonical hash of the call's arguments (queued, for
	// a call whose id the caller chose): a later submit of the same id with
	// other arguments is not this call (id_conflict). The hash is the
	// approval release's args_hash (PROTOCOL.md, "Gated calls").
	ArgsHash string `json:"args_hash,omitempty"`
	// Result is the call's result (finished; never on the wire).
	Result *ToolResult `json:"-"`
}

// DeadCall is a call the fleet gave up on: its deliveries ran out (every
// worker that took it was lost), or its retries did. It is kept, with the
// last error, to be inspected and replayed (PROTOCOL.md, "Dead calls").
type DeadCall struct {
	// Call is the call as it was published.
	Call ToolCall `json:"call"`
	// Error is the answer its caller got: worker_lost, or the last
	// retryable error.
	Error CallError `json:"error"`
	// Deliveries is how many times it was delivered to a worker.
	Deliveries int `json:"deliveries"`
	// Worker is the worker that declared it dead.
	Worker string `json:"worker,omitempty"`
	// DiedAt is when it was declared dead.
	DiedAt time.Time `json:"died_at"`
	// Origin is the dispatcher instance its result went to.
	Origin string `json:"origin,omitempty"`
	// ArgumentsOmitted reports that the record could not hold the call's
	// arguments and metadata (with them it was over the server's max
	// payload); such a call cannot be replayed.
	ArgumentsOmitted bool `json:"arguments_omitted,omitempty"`
	// Seq is the record's sequence in the dead calls stream, its handle for
	// replay (set when read, never on the wire).
	Seq uint64 `json:"-"`
}

// Refusal is the record of a message a worker dropped from a tool's call
// subject without answering it (PROTOCOL.md, "Refusals"): a call of a
// gated tool without a valid release — none, another call's, a bad
// signature, other arguments than approved, a release already used, or a
// call that already has its answer. Answering such a message under its
// call id would let whoever published it decide what the real caller of
// that id is told, so nobody is answered and operators are told instead.
type Refusal struct {
	// CallID is the call id the message claims ("" when unreadable).
	CallID string `json:"call_id,omitempty"`
	// Tool is the tool whose subject the message came on.
	Tool string `json:"tool"`
	// Reason classifies the refusal (no_release, bad_signature, reused, …).
	Reason string `json:"reason"`
	// Detail says what was wrong.
	Detail string `json:"detail"`
	// Seq is the message's sequence in the calls stream.
	Seq uint64 `json:"seq"`
	// PublishedAt is when the calls stream stored the message.
	PublishedAt time.Time `json:"published_at"`
	// MsgID is the message's Nats-Msg-Id header, as published.
	MsgID string `json:"msg_id,omitempty"`
	// Origin is the message's Windlass-Origin header, as published: the
	// dispatcher it claims to come from. NATS does not record which
	// client published a stored message; correlate PublishedAt with the
	// server's connection log to find it.
	Origin string `json:"origin,omitempty"`
	// Worker is the worker that refused it.
	Worker string `json:"worker"`
	// At is when it was refused.
	At time.Time `json:"at"`
}

// Cancellation is the record of a canceled call (PROTOCOL.md,
// "Cancellation").
type Cancellation struct {
	// CallID is the canceled call.
	CallID string `json:"call_id"`
	// Reason is the canceler's reason, shown in the result.
	Reason string `json:"reason,omitempty"`
	// At is when the cancellation was made.
	At time.Time `json:"at"`
}
