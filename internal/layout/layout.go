// Package layout is the one place that names the fleet's NATS subjects,
// JetStream streams, consumers and headers, and defines the streams'
// configuration. Every other package builds names through it; PROTOCOL.md
// documents the result for implementations in other languages.
//
// Only tool names (already restricted to [a-zA-Z0-9_-]) and ids this process
// generated are spliced into subjects. A call id, which callers choose, never
// is: results are addressed by [CallToken], a hash of the id.
package layout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/limits"
)

// Stream names.
const (
	CallsStream     = "WINDLASS_CALLS"
	ResultsStream   = "WINDLASS_RESULTS"
	ApprovalsStream = "WINDLASS_APPROVALS"
	EventsStream    = "WINDLASS_EVENTS"
	CancelsStream   = "WINDLASS_CANCELS"
	DeadStream      = "WINDLASS_DEAD"
	RefusalsStream  = "WINDLASS_REFUSALS"
)

// ReleasesBucket is the JetStream key-value bucket of the release ledger:
// which calls stream message first used each gated call's release (see
// package approval/release). Its stream is "KV_" + ReleasesBucket.
const ReleasesBucket = "WINDLASS_RELEASES"

// PayloadsBucket is the JetStream object store of the payloads too large
// for a message: a call's arguments, a result's content and value (see
// windlass.PayloadRef). Its stream is "OBJ_" + PayloadsBucket.
const PayloadsBucket = "WINDLASS_PAYLOADS"

// Subject roots.
const (
	callPrefix     = "windlass.call."
	resultPrefix   = "windlass.result."
	approvalPrefix = "windlass.approval."
	eventPrefix    = "windlass.event."
	cancelPrefix   = "windlass.cancel."
	deadPrefix     = "windlass.dead."
	refusedPrefix  = "windlass.refused."
	heldPrefix     = "windlass.held."
)

// MCPMetaCallID is the _meta key of a call's id in MCP: a windlass MCP
// server takes a tools/call request's as the call's id (its
// deduplication key) and answers with it (mcpserver.MetaCallID).
const MCPMetaCallID = "dev.windlass/call_id"

// Header names on call and result messages.
const (
	// HeaderOrigin carries the id of the dispatcher instance that accepts
	// the call's result: the result goes to ResultSubject(origin, call id).
	HeaderOrigin = "Windlass-Origin"
	// HeaderProtocol carries the protocol version of the message body.
	HeaderProtocol = "Windlass-Protocol"
	// HeaderArgsHash carries, on every call (older dispatchers set it
	// only on a call whose caller chose its id), the canonical SHA-256 of
	// its arguments (see approval/release), and the
	// worker copies it to the call's result: a resubmit of the id with
	// other arguments is refused id_conflict, whether the call is queued,
	// running or finished.
	HeaderArgsHash = "Windlass-Args-Hash"
	// HeaderKey carries, on a result, the key its call was counted for by
	// the fleet's limits (windlass.ToolCall.Key), copied by the worker: a
	// status query of a finished call still names it.
	HeaderKey = "Windlass-Key"
	// HeaderQueuedAt carries, on a result, when the calls stream stored
	// the call (RFC 3339), and HeaderDeadline the call's deadline: what a
	// status query reports of a finished call, whose call message is gone.
	HeaderQueuedAt = "Windlass-Queued-At"
	HeaderDeadline = "Windlass-Deadline"
	// HeaderReceipt carries, on a result, the worker's signed execution
	// receipt of the call (package receipt; PROTOCOL.md, "Execution
	// receipts"): on the result of every call a worker answered under an
	// approval release, and on every result of a worker configured to
	// sign them all.
	HeaderReceipt = "Windlass-Receipt"
	// HeaderTraceparent carries the call's W3C trace context when tracing
	// is on (the W3C name; internal/telemetry writes and reads it).
	HeaderTraceparent = "traceparent"
	// HeaderSlot, on a call message, says the call holds an admission
	// slot and its caller does not wait for its answer (value SlotHeld):
	// whoever stores its answer frees the slot once the answer is stored,
	// so that the slot is not held after a caller that went away (package
	// limits, "A call's slot").
	HeaderSlot = "Windlass-Slot"
)

// SlotHeld is the value of [HeaderSlot].
const SlotHeld = "held"

// CallSubject is the subject of one call of a tool:
// windlass.call.<tool>.<call token>. Each call is the one message on its
// subject, so the calls stream is also the record of the calls that are
// queued or running: a direct get by [CallByID] finds one until a worker
// acks it, which it does only once the call's result is stored.
func CallSubject(tool, callID string) string { return callPrefix + tool + "." + CallToken(callID) }

// CallDestination names a tool's calls in telemetry, whose span names
// must not carry a per-call token: windlass.call.<tool>.
func CallDestination(tool string) string { return callPrefix + tool }

// CallsOfTool is the filter of a tool's consumer: every call of the tool.
func CallsOfTool(tool string) string { return callPrefix + tool + ".*" }

// CallByID matches one call's message whatever its tool.
func CallByID(callID string) string { return callPrefix + "*." + CallToken(callID) }

// CallSubjects is the calls stream's subject filter.
const CallSubjects = callPrefix + "*.*"

// LegacyCallSubject is where protocol 1 fleets published a tool's calls
// (windlass.call.<tool>, one subject per tool). A calls stream created by
// such a fleet keeps the subject after its migration (see
// [EnsureStreams]), and a worker drains the calls queued there.
func LegacyCallSubject(tool string) string { return callPrefix + tool }

// OnItsSubject reports whether a call message of tool arrived on its own
// subject: CallSubject(tool, id) with token = CallToken(id), or tool's
// protocol 1 subject.
func OnItsSubject(subject, tool, token string) bool {
	rest, ok := strings.CutPrefix(subject, callPrefix)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, tool)
	return ok && (rest == "" || rest == "."+token)
}

// legacyCallSubjects is the protocol 1 calls stream's subject filter.
const legacyCallSubjects = callPrefix + "*"

// ApprovalSubject is the subject a gated tool's calls are published on, for
// the approval service.
func ApprovalSubject(tool string) string { return approvalPrefix + tool }

// ApprovalStatusSubject is the request/reply subject on which the approval
// service answers "what about call <id>?" with the held call. No stream
// captures it.
const ApprovalStatusSubject = "windlass.status.approval"

// ApprovalSummarySubject is the request/reply subject on which the approval
// service answers with the number of held calls pending, by tool (for
// `windlass status`). No stream captures it.
const ApprovalSummarySubject = "windlass.status.approvals"

// ApprovalSubjects is the approvals stream's subject filter.
const ApprovalSubjects = approvalPrefix + "*"

// ResultSubject is the subject of one call's result: the origin dispatcher's
// id, then the call's token. A dispatcher subscribes to
// ResultInbox(origin) and so receives its own results and nobody else's.
func ResultSubject(origin, callID string) string {
	return ResultSubjectOfToken(origin, CallToken(callID))
}

// ResultSubjectOfToken is [ResultSubject] for a call whose token is known
// already (a worker computes it once per delivery).
func ResultSubjectOfToken(origin, token string) string { return resultPrefix + origin + "." + token }

// ResultInbox is the subscription that receives every result for origin.
func ResultInbox(origin string) string { return resultPrefix + origin + ".*" }

// ResultByCall matches one call's result whatever its origin, for fetching
// it from the results stream on any dispatcher instance.
func ResultByCall(callID string) string { return resultPrefix + "*." + CallToken(callID) }

// ResultSubjects is the results stream's subject filter.
const ResultSubjects = resultPrefix + "*.*"

// CallToken is the subject token of a call id: the hex of the first 16
// bytes of its SHA-256. Call ids may hold '.', '*' or '>', tokens cannot.
func CallToken(callID string) string {
	sum := sha256.Sum256([]byte(callID))
	return hex.EncodeToString(sum[:16])
}

// EventSubject is the subject of one kind of event of a call:
// windlass.event.<call token>.<kind>, kind being a windlass.EventKind
// (queued, started, progress, retrying). Workers' events are plain (core)
// publishes that the events stream captures, never waited for; the
// dispatcher waits for its queued event, the record of an accepted call. One
// subject per kind makes the latest event of each kind one direct get,
// whatever order events of different publishers were stored in.
func EventSubject(callID, kind string) string {
	return eventPrefix + CallToken(callID) + "." + kind
}

// EventsOfCall matches every event of one call.
func EventsOfCall(callID string) string { return eventPrefix + CallToken(callID) + ".*" }

// EventSubjects is the events stream's subject filter.
const EventSubjects = eventPrefix + "*.*"

// CancelSubject is the subject of a call's cancellation:
// windlass.cancel.<call token>. The cancels stream remembers it, so a call
// canceled while queued is not run when a worker pulls it later; workers
// follow the stream to cancel calls they are running.
func CancelSubject(callID string) string { return cancelPrefix + CallToken(callID) }

// CancelSubjects is the cancels stream's subject filter.
const CancelSubjects = cancelPrefix + "*"

// DeadSubject is the subject of a tool's dead calls: windlass.dead.<tool>.
func DeadSubject(tool string) string { return deadPrefix + tool }

// DeadSubjects is the dead calls stream's subject filter.
const DeadSubjects = deadPrefix + "*"

// DeadMsgID is the Nats-Msg-Id of a dead call's record.
func DeadMsgID(callID string) string { return "dead:" + callID }

// RefusalSubject is the subject of the refusal records of a tool:
// windlass.refused.<tool>. A worker records there every message on the
// tool's call subject it dropped without answering (a gated call without
// a valid release), for operators.
func RefusalSubject(tool string) string { return refusedPrefix + tool }

// HeldProbeSubject is the core NATS subject (no stream) on which a worker
// asks the other workers of a tool whether one of them still holds a call
// message redelivered to it, and on which every worker of the tool answers
// for the messages it holds (see package worker: a redelivery after an
// outage is left to a live holder, not run beside it).
func HeldProbeSubject(tool string) string { return heldPrefix + tool }

// RefusalSubjects is the refusals stream's subject filter.
const RefusalSubjects = refusedPrefix + "*"

// RefusalMsgID is the Nats-Msg-Id of the refusal record of the calls
// stream's message seq: a redelivery of that message is recorded once.
func RefusalMsgID(seq uint64) string { return fmt.Sprintf("refused:%d", seq) }

// CancelMsgID is the Nats-Msg-Id of a call's cancellation.
func CancelMsgID(callID string) string { return "cancel:" + callID }

// ConsumerName is the durable pull consumer shared by every worker of tool.
func ConsumerName(tool string) string { return "tool-" + tool }

// ResultMsgID is the Nats-Msg-Id of a call's result: a second result for the
// same call inside the duplicate window is dropped by the stream.
func ResultMsgID(callID string) string { return "result:" + callID }

// SetCallRecord sets on a result message's headers the record of its call
// (see HeaderQueuedAt): queuedAt, when the calls stream stored the call;
// its deadline; argsHash, the one its call message carried; and key, the
// call's key. Zero values are left out.
func SetCallRecord(h nats.Header, queuedAt, deadline time.Time, argsHash, key string) {
	if !queuedAt.IsZero() {
		h[HeaderQueuedAt] = []string{queuedAt.UTC().Format(time.RFC3339Nano)}
	}
	if !deadline.IsZero() {
		h[HeaderDeadline] = []string{deadline.UTC().Format(time.RFC3339Nano)}
	}
	if argsHash != "" {
		h[HeaderArgsHash] = []string{argsHash}
	}
	if key != "" {
		h[HeaderKey] = []string{key}
	}
}

// MessageSize is how many bytes of the NATS server's max payload m takes:
// its data and its encoded headers. A message over the max payload is
// refused by the client before it is sent (nats.ErrMaxPayload).
func MessageSize(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(v) + len(": \r\n")
			}
		}
	}
	return n
}

// StreamOptions tune the streams for a deployment.
type StreamOptions struct {
	// Replicas of each stream; 0 means 1 (dev). Use 3 on a 3-node cluster.
	Replicas int
	// ResultsMaxAge is how long results stay fetchable; 0 means 24h.
	ResultsMaxAge time.Duration
	// Duplicates is the duplicate window for call and result ids; 0 means 10m.
	Duplicates time.Duration
	// DeadMaxAge is how long dead calls are kept for replay; 0 means 7 days.
	DeadMaxAge time.Duration
	// Storage of the streams; the zero value is file storage.
	Storage jetstream.StorageType
	// MaxQueuedCalls bounds the calls stream: the calls of every tool
	// that are queued or running, together. The NATS server refuses a
	// call past it (discard new), and the dispatcher answers its caller
	// overloaded. 0 means [limits.DefaultMaxQueuedCalls], [limits.NoLimit]
	// (any negative value) none. Only a dispatcher applies it to a stream
	// that exists (see [BoundCalls]); every other process only creates
	// the stream with it.
	MaxQueuedCalls int
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.ResultsMaxAge == 0 {
		o.ResultsMaxAge = 24 * time.Hour
	}
	if o.Duplicates == 0 {
		o.Duplicates = 10 * time.Minute
	}
	if o.DeadMaxAge == 0 {
		o.DeadMaxAge = 7 * 24 * time.Hour
	}
	if o.MaxQueuedCalls == 0 {
		o.MaxQueuedCalls = limits.DefaultMaxQueuedCalls
	}
	return o
}

// callsMaxMsgs is the calls stream's MaxMsgs for o (after withDefaults):
// the bound, or -1 for none.
func (o StreamOptions) callsMaxMsgs() int64 {
	if o.MaxQueuedCalls < 0 {
		return -1
	}
	return int64(o.MaxQueuedCalls)
}

// CallsConfig is the calls stream: work-queue retention (a message is gone
// once a worker acks it), deduplicated by call id, one subject per call,
// read by direct gets for status queries, and bounded by MaxQueuedCalls
// with new messages refused when it is full (discard new: a queued call
// is never dropped to make room).
func CallsConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        CallsStream,
		Description: "Windlass tool calls, one subject per call, by tool and call token",
		Subjects:    []string{CallSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
		Duplicates:  o.Duplicates,
		MaxMsgs:     o.callsMaxMsgs(),
		Discard:     jetstream.DiscardNew,
		AllowDirect: true,
	}
}

// ResultsConfig is the results stream: kept for ResultsMaxAge so any
// dispatcher can fetch a result by call id.
func ResultsConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        ResultsStream,
		Description: "Windlass tool results, by origin dispatcher and call token",
		Subjects:    []string{ResultSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
		MaxAge:      o.ResultsMaxAge,
		Duplicates:  o.Duplicates,
		AllowDirect: true,
	}
}

// ApprovalsConfig is the approvals stream: gated calls on their way to the
// approval service.
func ApprovalsConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        ApprovalsStream,
		Description: "Windlass gated calls awaiting the approval service",
		Subjects:    []string{ApprovalSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
		Duplicates:  o.Duplicates,
	}
}

// EventsConfig is the events stream: the latest few events of each kind of
// each call, kept as long as results, for status queries and watchers.
func EventsConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:              EventsStream,
		Description:       "Windlass call events (queued, started, progress, retrying), by call token and kind",
		Subjects:          []string{EventSubjects},
		Retention:         jetstream.LimitsPolicy,
		Storage:           o.Storage,
		Replicas:          o.Replicas,
		MaxAge:            o.ResultsMaxAge,
		MaxMsgsPerSubject: 8,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
	}
}

// CancelsConfig is the cancels stream: one record per canceled call, kept
// as long as results.
func CancelsConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:              CancelsStream,
		Description:       "Windlass call cancellations, by call token",
		Subjects:          []string{CancelSubjects},
		Retention:         jetstream.LimitsPolicy,
		Storage:           o.Storage,
		Replicas:          o.Replicas,
		MaxAge:            o.ResultsMaxAge,
		MaxMsgsPerSubject: 1,
		Duplicates:        o.Duplicates,
		AllowDirect:       true,
	}
}

// DeadConfig is the dead calls stream: calls that ran out of deliveries or
// retries, with their last error, kept for DeadMaxAge to be listed and
// replayed.
func DeadConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        DeadStream,
		Description: "Windlass dead calls (deliveries or retries exhausted), by tool",
		Subjects:    []string{DeadSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
		MaxAge:      o.DeadMaxAge,
		Duplicates:  o.Duplicates,
		AllowDirect: true,
	}
}

// RefusalsConfig is the refusals stream: the messages workers dropped
// without answering (forged or replayed gated calls), kept as long as dead
// calls, and at most MaxRefusals of them, oldest dropped first, so that a
// flood of forgeries cannot fill the disk.
func RefusalsConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        RefusalsStream,
		Description: "Windlass refusals: messages on call subjects dropped unanswered (no valid release), by tool",
		Subjects:    []string{RefusalSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
		MaxAge:      o.DeadMaxAge,
		MaxMsgs:     MaxRefusals,
		Discard:     jetstream.DiscardOld,
		Duplicates:  o.Duplicates,
		AllowDirect: true,
	}
}

// MaxRefusals bounds the refusals stream.
const MaxRefusals = 100_000

// AllStreams is the configuration of every stream of the fleet.
func AllStreams(o StreamOptions) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{CallsConfig(o), ResultsConfig(o), ApprovalsConfig(o), EventsConfig(o), CancelsConfig(o), DeadConfig(o), RefusalsConfig(o)}
}

// ReleasesConfig is the release ledger's bucket: one key per gated call
// (its token), each kept until its release expires (a per-key TTL, which
// needs the limit markers), replicated like the streams.
func ReleasesConfig(o StreamOptions) jetstream.KeyValueConfig {
	o = o.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:         ReleasesBucket,
		Description:    "Windlass release ledger: the calls stream message that used each gated call's release",
		History:        1,
		Storage:        o.Storage,
		Replicas:       o.Replicas,
		LimitMarkerTTL: time.Minute,
	}
}

// EnsureReleases returns the release ledger's bucket, creating it when it
// is missing (like [EnsureStreams], it never changes an existing one).
func EnsureReleases(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.KeyValue, error) {
	return ensureBucket(ctx, js, ReleasesBucket, "KV_"+ReleasesBucket,
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, ReleasesBucket) },
		func(ctx context.Context) (jetstream.KeyValue, error) {
			return js.CreateKeyValue(ctx, ReleasesConfig(o))
		})
}

// ensureBucket opens a bucket, creating it when it is missing (and opening
// it again when another process created it first), asking again like
// EnsureStreams.
func ensureBucket[B any](ctx context.Context, js jetstream.JetStream, name, stream string, open, create func(context.Context) (B, error)) (B, error) {
	b, err := retry.Value(ctx, ensurePolicy, func(ctx context.Context) (B, error) {
		before := js.Conn().LastError()
		b, err := open(ctx)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			b, err = create(ctx)
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				b, err = open(ctx) // another process created it first
			}
		}
		return b, onlyTimeoutsAgain(ctx, deniedAPI(js, before, stream, err))
	})
	if err != nil {
		return b, fmt.Errorf("layout: ensure bucket %s: %w", name, err)
	}
	return b, nil
}

// Payload kinds, the first part of a payload object's name.
const (
	PayloadArguments = "args"
	PayloadContent   = "content"
	PayloadData      = "data"
)

// PayloadObject is the name of a call's payload object of a kind
// (PayloadArguments, PayloadContent, PayloadData): the kind, the call's
// token and a unique part, so that a second upload for the same call (a
// resubmit, a redelivered attempt) never replaces the object a stored
// message already points at.
func PayloadObject(kind, callID, unique string) string {
	return kind + "." + CallToken(callID) + "." + unique
}

// PayloadsConfig is the payloads bucket: each object kept as long as the
// results (ResultsMaxAge) and the duplicate window more — an object is
// stored before its message, and a message whose publish is retried may
// be stored up to that much later, so it never outlives its objects —
// replicated like the streams. A payload whose message was never stored
// (a refused call, a worker lost after its upload) is gone after the same
// time.
func PayloadsConfig(o StreamOptions) jetstream.ObjectStoreConfig {
	o = o.withDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket:      PayloadsBucket,
		Description: "Windlass payloads by reference: call arguments and results too large for a message",
		TTL:         o.ResultsMaxAge + o.Duplicates,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
	}
}

// EnsurePayloads returns the payloads bucket, creating it when it is
// missing (like [EnsureStreams], it never changes an existing one).
func EnsurePayloads(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.ObjectStore, error) {
	return ensureBucket(ctx, js, PayloadsBucket, "OBJ_"+PayloadsBucket,
		func(ctx context.Context) (jetstream.ObjectStore, error) { return js.ObjectStore(ctx, PayloadsBucket) },
		func(ctx context.Context) (jetstream.ObjectStore, error) {
			return js.CreateObjectStore(ctx, PayloadsConfig(o))
		})
}

// EnsureStreams creates each stream that is missing. A stream that exists
// is left as it is: a process started with dev defaults (one replica) never
// rewrites a production stream (three replicas); change a stream's settings
// deliberately, with the nats CLI or a deploy step. Two exceptions: the
// calls stream of a protocol 1 fleet is migrated (migrateCalls), and a
// dispatcher given a bound applies it with [BoundCalls]. It is idempotent and safe
// to run from every process that uses the streams. A request the server
// does not answer in time (a slow disk creating a stream, a server still
// starting, a cluster still placing its first streams) is made again for up
// to half a minute (ensurePolicy), while ctx lasts — for each stream in
// turn; a placement that can never succeed (more replicas than servers)
// looks the same as a cluster still forming, and fails after it with the
// server's error. A stream this user may not read fails at once, and one
// it may not create is waited for, for another role to create it
// (ErrNotPermitted, should it never come).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfgs ...jetstream.StreamConfig) error {
	for _, cfg := range cfgs {
		err := retry.Do(ctx, ensurePolicy, func(ctx context.Context) error {
			before := js.Conn().LastError()
			return onlyTimeoutsAgain(ctx, deniedAPI(js, before, cfg.Name, ensureStream(ctx, js, cfg)))
		})
		if err != nil {
			return fmt.Errorf("layout: ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// ensurePolicy asks again while a request goes unanswered or the cluster
// is still forming (see onlyTimeoutsAgain), for at most half a minute, each
// request waiting the client's timeout (5 s when ctx has no deadline).
var ensurePolicy = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, For: 30 * time.Second}

// clusterForming are the JetStream API errors of a cluster that has
// elected a meta leader but cannot place a replicated stream yet: the
// leader has not heard from enough peers (10005 no suitable peers, 10023
// insufficient resources) or is between leaders (10008 temporarily
// unavailable). They pass within seconds of the servers starting, so a
// process started with them (every service of a deployment starts at once)
// waits instead of exiting.
var clusterForming = []jetstream.ErrorCode{10005, 10008, 10023}

// onlyTimeoutsAgain marks err permanent unless, while ctx lasts, it is a
// request the server did not answer in time or refused because the
// cluster is still forming.
func onlyTimeoutsAgain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return retry.Permanent(err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && slices.Contains(clusterForming, apiErr.ErrorCode) {
		return err
	}
	return retry.Permanent(err)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // another process created it first
		}
		return err
	}
	if err != nil || cfg.Name != CallsStream {
		return err
	}
	return migrateCalls(ctx, js, s.CachedInfo().Config)
}

// migrateCalls brings a calls stream created by a protocol 1 fleet (one
// subject per tool, no direct gets) to protocol 2: it adds the per-call
// subjects and allows direct gets, and keeps the old subjects, so the calls
// still queued there are run (workers filter both). Nothing else of the
// stream changes, and a stream already migrated is left alone. Every
// process that ensures the streams may do it; updates are idempotent.
func migrateCalls(ctx context.Context, js jetstream.JetStream, cur jetstream.StreamConfig) error {
	if cur.AllowDirect && slices.Contains(cur.Subjects, CallSubjects) {
		return nil
	}
	if !slices.Contains(cur.Subjects, CallSubjects) {
		cur.Subjects = append(cur.Subjects, CallSubjects)
	}
	cur.AllowDirect = true
	if _, err := js.UpdateStream(ctx, cur); err != nil {
		return fmt.Errorf("migrate the calls stream to per-call subjects: %w", err)
	}
	return nil
}

// CallsBound is a change of the calls stream's bound made by
// [BoundCalls]: its MaxMsgs and discard policy before and after (MaxMsgs
// -1: none).
type CallsBound struct {
	FromMaxMsgs, ToMaxMsgs int64
	FromDiscard, ToDiscard jetstream.DiscardPolicy
}

// BoundCalls gives the existing calls stream the bound of o
// (MaxQueuedCalls, with discard new), when its MaxMsgs or discard policy
// differ, and returns what it changed (nil when nothing). Nothing else of
// the stream changes; a stream with no bound and none wanted is left as it
// is whatever its discard policy. MaxMsgs and the discard policy change in
// one update: lowering the bound below the calls queued drops none of
// them (the server drops messages over MaxMsgs only under discard old),
// it only refuses new calls until the queue is under the bound again.
//
// The dispatchers apply it, being where calls are admitted; every
// dispatcher of a fleet should be given the same bound, or each start
// applies its own.
func BoundCalls(ctx context.Context, js jetstream.JetStream, o StreamOptions) (*CallsBound, error) {
	o = o.withDefaults()
	var change *CallsBound
	err := retry.Do(ctx, ensurePolicy, func(ctx context.Context) error {
		change = nil
		s, err := js.Stream(ctx, CallsStream)
		if err != nil {
			return onlyTimeoutsAgain(ctx, err)
		}
		cur := s.CachedInfo().Config
		want := o.callsMaxMsgs()
		if boundHolds(cur, want) {
			return nil
		}
		change = &CallsBound{FromMaxMsgs: cur.MaxMsgs, ToMaxMsgs: want, FromDiscard: cur.Discard, ToDiscard: jetstream.DiscardNew}
		cur.MaxMsgs, cur.Discard = want, jetstream.DiscardNew
		_, err = js.UpdateStream(ctx, cur)
		if errors.Is(err, context.DeadlineExceeded) && refusedPublish(js.Conn().LastError(), "$JS.API.STREAM.UPDATE."+CallsStream) {
			// The server refused the request rather than not answering
			// it: asking again waits as long for the same refusal.
			return retry.Permanent(fmt.Errorf("%w: this NATS user may not update the stream (%w)", ErrNotPermitted, js.Conn().LastError()))
		}
		return onlyTimeoutsAgain(ctx, err)
	})
	if err != nil {
		return nil, fmt.Errorf("layout: bound the calls stream to %d calls: %w", o.callsMaxMsgs(), err)
	}
	return change, nil
}

// ErrNotPermitted is a request the NATS server refused for the
// connection's permissions: it reports a violation to the connection
// (nats.ErrPermissionViolation) and never answers, so the request only
// times out.
var ErrNotPermitted = errors.New("layout: not permitted")

// deniedAPI is err, or err marked ErrNotPermitted when it is a request
// timeout and, during the attempt (the connection's last error was
// before), the server refused this user the request's own JetStream API
// subject (the server answers such a request with nothing, so the client
// sees only the timeout). A refused info request ends the ensure: asking
// again cannot help. A refused creation does not: a user that may not
// create the stream (a worker, deploy/nats/accounts.conf) waits, asking
// again, for the role that may (the approval service) to create it, and
// ends, if it never comes, with the permission named. A refusal from
// before the attempt, or of another request (a connection keeps its last
// error until it reconnects), is not this one's.
func deniedAPI(js jetstream.JetStream, before error, stream string, err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	last := js.Conn().LastError()
	if last == before {
		return err
	}
	switch {
	case refusedPublish(last, "$JS.API.STREAM.INFO."+stream):
		return retry.Permanent(fmt.Errorf("%w: this NATS user may not read it (%w): %w", ErrNotPermitted, last, err))
	case refusedPublish(last, "$JS.API.STREAM.CREATE."+stream):
		return fmt.Errorf("%w: this NATS user may not create it, and no role that may has (%w): %w", ErrNotPermitted, last, err)
	}
	return err
}

// refusedPublish reports whether err is the server's permissions
// violation of a publish to subject: why a request to it timed out.
func refusedPublish(err error, subject string) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Publish to "`+subject+`"`)
}

// boundHolds reports whether a calls stream configured as cur has the
// bound want already (-1: none, whatever the discard policy).
func boundHolds(cur jetstream.StreamConfig, want int64) bool {
	if want < 0 {
		return cur.MaxMsgs <= 0
	}
	return cur.MaxMsgs == want && cur.Discard == jetstream.DiscardNew
}

// IsCallsFull reports whether err is the NATS server's refusal of a
// message because its stream is full: a stream with MaxMsgs and discard
// new, such as the calls stream at its bound (MaxQueuedCalls). The server
// answers it with JetStream API error 10077 ("store failed"), whose
// description is the store's error, "maximum messages exceeded".
func IsCallsFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStoreFailed && apiErr.Description == jsMaxMsgsExceeded
}

// The NATS server's error for a message over a discard-new stream's
// MaxMsgs (server: JSStreamStoreFailedF with ErrMaxMsgs).
const (
	jsErrStoreFailed  jetstream.ErrorCode = 10077
	jsMaxMsgsExceeded                     = "maximum messages exceeded"
)

// HasLegacyCalls reports whether a calls stream's configuration still
// holds the protocol 1 subjects, whose queued calls a worker must drain.
func HasLegacyCalls(cfg jetstream.StreamConfig) bool {
	return slices.Contains(cfg.Subjects, legacyCallSubjects)
}
