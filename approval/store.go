package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/wirejson"
)

// Status is a held call's state.
type Status string

// The states of a held call. Pending is the only one a decision can leave.
const (
	StatusPending  Status = "pending"
	StatusApproved Status = "approved"
	StatusRejected Status = "rejected"
	StatusExpired  Status = "expired"
	// StatusCanceled: the caller canceled the call (dispatcher Cancel)
	// while it was pending; it is never released, and decisions on it are
	// refused like on any decided call.
	StatusCanceled Status = "canceled"
)

func (s Status) valid() bool {
	switch s {
	case StatusPending, StatusApproved, StatusRejected, StatusExpired, StatusCanceled:
		return true
	}
	return false
}

// HeldCall is a gated call as the approval service keeps it.
type HeldCall struct {
	// ID is the call id.
	ID string `json:"id"`
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// Arguments are the arguments as the caller sent them; absent when
	// they travel by reference (see ArgumentsRef).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ArgumentsRef points at arguments too large for a message, in the
	// fleet's object store; ArgumentsPreview is their first part, and
	// GET /v1/approvals/{id}/arguments fetches them whole (checked
	// against the reference's SHA-256). ArgsHash covers them whole.
	ArgumentsRef     *windlass.PayloadRef `json:"arguments_ref,omitempty"`
	ArgumentsPreview string               `json:"arguments_preview,omitempty"`
	// ArgsHash is the hash of the arguments a reviewer approves now: of
	// ApprovedArguments once a reviewer edited them, else of Arguments. An
	// approval must quote it.
	ArgsHash string `json:"args_hash"`
	// ApprovedArguments are a reviewer's edit of the arguments, if any.
	ApprovedArguments json.RawMessage `json:"approved_arguments,omitempty"`
	// SpecHash is the spec version the caller saw.
	SpecHash string `json:"spec_hash,omitempty"`
	// Requester is who asked for the call (metadata "requester").
	Requester string `json:"requester,omitempty"`
	// Metadata is the caller's metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
	// RequestedAt is when the service received the call.
	RequestedAt time.Time `json:"requested_at"`
	// ExpiresAt is when the approval window lapses.
	ExpiresAt time.Time `json:"expires_at"`
	// Status is the call's state.
	Status Status `json:"status"`
	// RequiredApprovals is how many distinct reviewers must approve.
	RequiredApprovals int `json:"required_approvals"`
	// Approvers are the reviewers who approved so far, in order.
	Approvers []string `json:"approvers,omitempty"`
	// RejectedBy is the reviewer who rejected the call.
	RejectedBy string `json:"rejected_by,omitempty"`
	// Reason is the rejection's (or the cancellation's) reason.
	Reason string `json:"reason,omitempty"`
	// NoRetry is true for a call rejected with "do not retry": its caller
	// is told not to make it again, with these or other arguments (see
	// [RejectedMessage]).
	NoRetry bool `json:"no_retry"`
	// ReviewerGroups are the groups whose members may see and decide the
	// call (its tool's ToolPolicy.ReviewerGroups when it was held); empty:
	// any reviewer may.
	ReviewerGroups []string `json:"reviewer_groups"`
	// DecidedAt is when the call left pending.
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Released is true once an approved call was published to its tool.
	Released bool `json:"released"`
	// Undeliverable is, for an approved call that was never published to
	// its tool, the code its caller was answered with instead: overloaded
	// (the fleet's queue full until the call's deadline), or
	// payload_too_large (too large with its release for the NATS server).
	Undeliverable windlass.ErrorCode `json:"undeliverable,omitempty"`

	call        *windlass.ToolCall // decoded from callJSON when first needed (see toolCall)
	callJSON    string
	forbidSelf  bool
	origin      string
	traceparent string // the call's W3C trace context, when it came with one
}

// store is the approval service's Redis layout (see the package doc,
// "Redis layout"): a held call's state, the indexes and the audit log in
// one hash slot ({index}), so that every transition is one script; the
// call's bulk (the call message, its arguments) in a key of its own, tagged
// by the call id, so that the bulk shards across a Redis Cluster.
type store struct {
	rc          redis.UniversalClient
	prefix      string
	retention   time.Duration // how long a call's bulk outlives its window
	replicaAcks int           // replicas that must have a hold (Config.ReplicaAcks)
}

// ReplicaAckTimeout bounds how long a hold waits for Config.ReplicaAcks
// replicas to have it.
const ReplicaAckTimeout = time.Second

// ErrNotReplicated is a hold or an approval that fewer replicas than
// Config.ReplicaAcks acknowledged within ReplicaAckTimeout: a failover now
// could lose it, so a call to hold is left for redelivery, to be held
// again, and an approved call is not released yet (the release is tried
// again, as any failed one).
var ErrNotReplicated = errors.New("approval: the hold has not reached enough Redis replicas")

// index is the hash tag of the state and the indexes.
const index = "{index}:"

func (s *store) callKey(id string) string   { return s.prefix + index + "call:" + id }
func (s *store) bodyKey(id string) string   { return s.prefix + "call:{" + id + "}" }
func (s *store) statusKey(st Status) string { return s.prefix + index + "status:" + string(st) }
func (s *store) pendingKey() string         { return s.prefix + index + "pending" }
func (s *store) auditKey() string           { return s.prefix + index + "audit" }
func (s *store) unreleasedKey() string      { return s.prefix + index + "unreleased" }
func (s *store) unansweredKey() string      { return s.prefix + index + "unanswered" } // decided against, callers not answered yet
func (s *store) queuesKey() string          { return s.prefix + index + "queues" }     // the audit stream's notification queues
func (s *store) webhooksKey() string        { return s.prefix + "webhooks" }
func (s *store) claimKey(id string) string {
	return s.prefix + "claim:{" + id + "}"
} // the message that claimed the id without holding it (see claim)

// rateKey is a reviewer's decision rate; redis_rate puts "rate:" before it.
func (s *store) rateKey(reviewer string) string { return s.prefix + "reviewer:" + reviewer }
func (s *store) statusKeys() (keys [4]string) { // pending, approved, rejected, expired
	for i, st := range []Status{StatusPending, StatusApproved, StatusRejected, StatusExpired} {
		keys[i] = s.statusKey(st)
	}
	return keys
}

// auditLua is the scripts' one way to append to the audit log:
// audit(stream, state, field, value, ...) adds the entry, with the call's
// reviewer_groups (from its state) when it has any, so that the audit log
// shows a reviewer only the entries of calls they may see; and records
// the entry's id in the call's state (the field audit_ids,
// space-separated), the index of the call's history: reading it costs the
// call's own entries, never a scan of the log (see history.go).
const auditLua = `
local function audit(stream, state, ...)
  local f = {...}
  local g = redis.call('HGET', state, 'reviewer_groups')
  if g and g ~= '' then f[#f + 1] = 'reviewer_groups'; f[#f + 1] = g end
  local aid = redis.call('XADD', stream, '*', unpack(f))
  redis.call('HSET', state, 'audit_ids', (redis.call('HGET', state, 'audit_ids') or '') .. aid .. ' ')
  return aid
end
`

// holdScript stores a new held call unless it exists (a redelivery).
// KEYS: call, pending zset, status:pending, audit. ARGV: id, requested_ms,
// expires_ms, then field/value pairs.
var holdScript = redis.NewScript(auditLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'status', 'pending')
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
audit(KEYS[4], KEYS[1], 'event', 'requested', 'call_id', ARGV[1], 'actor', redis.call('HGET', KEYS[1], 'requester') or '')
return 1
`)

// decideScript applies one reviewer's decision atomically. A decided call
// enters its status set scored by the decision's time (for the retention);
// an approved one also enters the unreleased set.
// KEYS: call, pending, status:pending, status:approved, status:rejected, audit, unreleased, unanswered.
// ARGV: id, action, reviewer, now_ms, seen_hash, edited_args, edited_hash, reason,
// the caller's arguments (for an edit's audit entry: the bulk is on another slot),
// no_retry ('1' or '0', for a rejection).
var decideScript = redis.NewScript(auditLua + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'missing'} end
if st ~= 'pending' then return {'decided', st} end
local id, action, reviewer, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if tonumber(redis.call('HGET', KEYS[1], 'expires_ms')) <= tonumber(now) then return {'lapsed'} end
if action == 'reject' then
  redis.call('HSET', KEYS[1], 'status', 'rejected', 'rejected_by', reviewer, 'reason', ARGV[8], 'no_retry', ARGV[10], 'decided_ms', now)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZADD', KEYS[5], now, id)
  redis.call('ZADD', KEYS[8], now, id)
  if ARGV[10] == '1' then
    audit(KEYS[6], KEYS[1], 'event', 'rejected', 'call_id', id, 'actor', reviewer, 'reason', ARGV[8], 'no_retry', '1')
  else
    audit(KEYS[6], KEYS[1], 'event', 'rejected', 'call_id', id, 'actor', reviewer, 'reason', ARGV[8])
  end
  return {'rejected'}
end
if redis.call('HGET', KEYS[1], 'args_hash') ~= ARGV[5] then return {'hash_mismatch'} end
if redis.call('HGET', KEYS[1], 'forbid_self') == '1' and redis.call('HGET', KEYS[1], 'requester') == reviewer then return {'self'} end
local approvers = redis.call('HGET', KEYS[1], 'approvers') or ''
if ARGV[6] ~= '' then
  -- An edit restarts the approvals: earlier ones were for other arguments.
  local original = redis.call('HGET', KEYS[1], 'approved_args') or ARGV[9]
  redis.call('HSET', KEYS[1], 'approved_args', ARGV[6], 'args_hash', ARGV[7])
  audit(KEYS[6], KEYS[1], 'event', 'edited', 'call_id', id, 'actor', reviewer, 'before', original, 'after', ARGV[6])
  approvers = ''
end
for a in string.gmatch(approvers, '[^,]+') do
  if a == reviewer then return {'already'} end
end
if approvers == '' then approvers = reviewer else approvers = approvers .. ',' .. reviewer end
redis.call('HSET', KEYS[1], 'approvers', approvers)
local n = 0
for _ in string.gmatch(approvers, '[^,]+') do n = n + 1 end
if n < tonumber(redis.call('HGET', KEYS[1], 'required')) then
  audit(KEYS[6], KEYS[1], 'event', 'approval', 'call_id', id, 'actor', reviewer)
  return {'partial', tostring(n)}
end
redis.call('HSET', KEYS[1], 'status', 'approved', 'decided_ms', now)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZADD', KEYS[4], now, id)
redis.call('ZADD', KEYS[7], now, id)
audit(KEYS[6], KEYS[1], 'event', 'approved', 'call_id', id, 'actor', reviewer)
return {'approved'}
`)

// expireScript expires a pending call whose window lapsed.
// KEYS: call, pending, status:pending, status:expired, audit, unanswered.
// ARGV: id, now_ms.
var expireScript = redis.NewScript(auditLua + `
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
if tonumber(redis.call('HGET', KEYS[1], 'expires_ms')) > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'status', 'expired', 'decided_ms', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[2], ARGV[1])
audit(KEYS[5], KEYS[1], 'event', 'expired', 'call_id', ARGV[1], 'actor', 'system')
return 1
`)

// cancelScript cancels a pending call, once; a call in any other state is
// left as it is. It returns the state it found ("missing" for none), or
// "canceled" when it made the change.
// KEYS: call, pending, status:pending, status:canceled, audit, unanswered.
// ARGV: id, now_ms, reason.
var cancelScript = redis.NewScript(auditLua + `
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 'missing' end
if st ~= 'pending' then return st end
redis.call('HSET', KEYS[1], 'status', 'canceled', 'reason', ARGV[3], 'decided_ms', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[2], ARGV[1])
audit(KEYS[5], KEYS[1], 'event', 'canceled', 'call_id', ARGV[1], 'actor', 'caller', 'reason', ARGV[3])
return 'canceled'
`)

// closedScript ends an approved call's release, once: ARGV[2] is
// "released" (published to its tool; ARGV[3] "1") or "undeliverable" (it
// never can be, its caller answered instead; ARGV[3] the code). Either
// takes it out of the unreleased set and writes the field and an audit
// entry of that name; the first to come stands.
// KEYS: call, audit, unreleased. ARGV: id, field, value, then the audit
// entry's other fields and values.
var closedScript = redis.NewScript(auditLua + `
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end -- deleted by the retention meanwhile
if redis.call('HGET', KEYS[1], 'released') == '1' or redis.call('HEXISTS', KEYS[1], 'undeliverable') == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
audit(KEYS[2], KEYS[1], 'event', ARGV[2], 'call_id', ARGV[1], 'actor', 'system', unpack(ARGV, 4))
return 1
`)

// bodyScript writes a held call's body, with its expiry, unless it has
// one (the first message of an id is the call) or another message claimed
// the id without holding it (see claimScript). It returns {'written' or
// 'held', the arguments hash of the body the id has now (the one written,
// or the one found; "" for a body written before bodies held their hash)},
// {'other', the sequence of the message whose body it is}, {'claimed',
// the claiming message's claim} or {'refused', this message's own claim
// as a refusal (see claimScript): it was answered, and is never held}.
// The body keeps the message's sequence (intake_seq): a hold of that
// message interrupted after its body is its own, not another's (see
// claimScript), and only that message finishes it — another of the id,
// even with the same arguments, would write the state with its own
// requester and origin. KEYS: the body, the id's claim. ARGV: the expiry
// (Unix ms), the message's sequence, then the fields and values
// (intake_args_hash among them: the hash the call came with, not the
// state's args_hash, which an edit changes).
var bodyScript = redis.NewScript(refusalLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  local seq = redis.call('HGET', KEYS[1], 'intake_seq')
  if seq and seq ~= ARGV[2] then return {'other', seq} end
  return {'held', redis.call('HGET', KEYS[1], 'intake_args_hash') or ''}
end
local by = redis.call('GET', KEYS[2])
if by and by ~= ARGV[2] then
  if refusedBy(by, ARGV[2]) then return {'refused', by} end
  return {'claimed', by}
end
redis.call('HSET', KEYS[1], 'intake_seq', ARGV[2], unpack(ARGV, 3))
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
return {'written', redis.call('HGET', KEYS[1], 'intake_args_hash')}
`)

// errAnotherCall is a message of an id whose held call (its body written
// already) came from another message, or one of an id another message
// claimed: not that call.
var errAnotherCall = errors.New("approval: the id is held or claimed by another message")

// refusedError is a message refused before (its claim of the id says
// so, with the code it was answered): its redelivery is not held, even
// where it could be now (its tool's bound read since, a registry
// changed), as its caller was told it was not.
type refusedError struct{ code windlass.ErrorCode }

func (e *refusedError) Error() string {
	return fmt.Sprintf("approval: the message was refused before (%s)", e.code)
}

// hold persists a new held call, taken in from the approvals stream's
// message at sequence seq; it reports false for one already held.
// The bulk is written first, on its own slot, with an expiry (the window
// and the retention after it) so that a crash before the state is written
// leaves nothing for good; the redelivered call writes it again.
func (s *store) hold(ctx context.Context, h *HeldCall, seq uint64) (bool, error) {
	callJSON, err := marshalCall(*h.call)
	if err != nil {
		return false, err
	}
	meta, _ := json.Marshal(h.Metadata)
	body := []any{"call", string(callJSON), "args", string(h.Arguments), "metadata", string(meta), "intake_args_hash", h.ArgsHash}
	if h.ArgumentsRef != nil {
		ref, _ := json.Marshal(h.ArgumentsRef)
		body = append(body, "args_ref", string(ref), "args_preview", h.ArgumentsPreview)
	}
	// Written only when there is none: a second message with a held
	// call's id (anyone who may publish calls may send one) must not
	// change what the reviewers see and approve, nor what is released.
	// Nor may the state be written from such a message once a body is:
	// a hold interrupted between the two (a crash, a failed write) leaves
	// the first message's body, and its redelivery, not another message
	// of the id, writes the state.
	// Nor is it held once another message of the id claimed it (one
	// waiting for its tool's bound, one refused and answered): checked in
	// the same script, so that a refusal never answers an id held
	// meanwhile (see claim).
	bodyArgs := append([]any{h.ExpiresAt.Add(s.retention).UnixMilli(), seq}, body...)
	got, err := bodyScript.Run(ctx, s.rc, []string{s.bodyKey(h.ID), s.claimKey(h.ID)}, bodyArgs...).StringSlice()
	if err != nil {
		return false, fmt.Errorf("approval: hold %q: %w", h.ID, err)
	}
	if len(got) != 2 {
		return false, fmt.Errorf("approval: hold %q: unexpected reply %q", h.ID, got)
	}
	switch got[0] {
	case "refused":
		_, code, _ := strings.Cut(got[1], " ")
		return false, &refusedError{code: windlass.ErrorCode(code)}
	case "claimed":
		return false, fmt.Errorf("%w: %q is claimed by message %s, which does not hold it", errAnotherCall, h.ID, got[1])
	case "other":
		return false, fmt.Errorf("%w: %q is held from message %s", errAnotherCall, h.ID, got[1])
	}
	if bodyHash := got[1]; bodyHash != "" && bodyHash != h.ArgsHash {
		return false, fmt.Errorf("%w: %q holds arguments of hash %s, this message %s", errAnotherCall, h.ID, bodyHash, h.ArgsHash)
	}
	args := []any{h.ID, h.RequestedAt.UnixMilli(), h.ExpiresAt.UnixMilli(),
		"args_hash", h.ArgsHash, "tool", h.Tool,
		"spec_hash", h.SpecHash, "requester", h.Requester, "origin", h.origin,
		"requested_ms", h.RequestedAt.UnixMilli(), "expires_ms", h.ExpiresAt.UnixMilli(),
		"required", h.RequiredApprovals, "forbid_self", boolField(h.forbidSelf), "released", "0", "traceparent", h.traceparent,
		"reviewer_groups", strings.Join(h.ReviewerGroups, ",")}
	n, err := holdScript.Run(ctx, s.rc, []string{s.callKey(h.ID), s.pendingKey(), s.statusKey(StatusPending), s.auditKey()}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("approval: hold %q: %w", h.ID, err)
	}
	if err := s.waitReplicas(ctx, h); err != nil {
		return false, err
	}
	return n == 1, nil
}

// waitReplicas waits until s.replicaAcks replicas have every write made
// so far of h: its hold (for a call held before too: it may be held on a
// master that is no longer followed), or its approval, before the call is
// released on it. WAIT counts the writes of its own connection, and h's
// writes may have gone through others, so it follows a write of its own
// on the same connection: the master's replication stream is ordered, and
// a replica that has this write has the ones before.
func (s *store) waitReplicas(ctx context.Context, h *HeldCall) error {
	if s.replicaAcks <= 0 {
		return nil
	}
	pipe := s.rc.Pipeline() // one connection
	pipe.PExpireAt(ctx, s.bodyKey(h.ID), h.ExpiresAt.Add(s.retention))
	acks := pipe.Do(ctx, "WAIT", s.replicaAcks, ReplicaAckTimeout.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("approval: call %q: wait for replicas: %w", h.ID, err)
	}
	if got, _ := acks.Int64(); got < int64(s.replicaAcks) {
		return fmt.Errorf("approval: call %q: %d of %d replicas have it after %s: %w", h.ID, got, s.replicaAcks, ReplicaAckTimeout, ErrNotReplicated)
	}
	return nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// decision is one reviewer's input to decide.
type decision struct {
	approve    bool
	reviewer   string
	seenHash   string
	editedArgs json.RawMessage
	editedHash string
	reason     string
	noRetry    bool            // a rejection: the caller must not retry
	original   json.RawMessage // the caller's arguments, with an edit
}

// decide applies d and returns the script's verdict.
func (s *store) decide(ctx context.Context, id string, d decision, now time.Time) ([]string, error) {
	k := s.statusKeys()
	action := "reject"
	if d.approve {
		action = "approve"
	}
	res, err := decideScript.Run(ctx, s.rc,
		[]string{s.callKey(id), s.pendingKey(), k[0], k[1], k[2], s.auditKey(), s.unreleasedKey(), s.unansweredKey()},
		id, action, d.reviewer, now.UnixMilli(), d.seenHash, string(d.editedArgs), d.editedHash, d.reason, string(d.original), boolField(d.noRetry)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("approval: decide %q: %w", id, err)
	}
	return res, nil
}

// expireDue expires every pending call whose window lapsed by now and
// returns their ids.
func (s *store) expireDue(ctx context.Context, now time.Time) ([]string, error) {
	ids, err := s.rc.ZRangeByScore(ctx, s.pendingKey(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: 256}).Result()
	if err != nil {
		return nil, fmt.Errorf("approval: due calls: %w", err)
	}
	k := s.statusKeys()
	var expired []string
	for _, id := range ids {
		n, err := expireScript.Run(ctx, s.rc, []string{s.callKey(id), s.pendingKey(), k[0], k[3], s.auditKey(), s.unansweredKey()}, id, now.UnixMilli()).Int()
		if err != nil {
			return expired, fmt.Errorf("approval: expire %q: %w", id, err)
		}
		if n == 1 {
			expired = append(expired, id)
		}
	}
	return expired, nil
}

// cancel marks a pending call canceled. It reports whether it did: false
// for a call not held, or no longer pending (decided, expired, canceled
// before).
func (s *store) cancel(ctx context.Context, id, reason string, now time.Time) (bool, error) {
	res, err := cancelScript.Run(ctx, s.rc,
		[]string{s.callKey(id), s.pendingKey(), s.statusKey(StatusPending), s.statusKey(StatusCanceled), s.auditKey(), s.unansweredKey()},
		id, now.UnixMilli(), reason).Text()
	if err != nil {
		return false, fmt.Errorf("approval: cancel %q: %w", id, err)
	}
	return res == string(StatusCanceled), nil
}

func (s *store) markReleased(ctx context.Context, id string) error {
	if err := closedScript.Run(ctx, s.rc, s.closedKeys(id), id, "released", "1").Err(); err != nil {
		return fmt.Errorf("approval: mark %q released: %w", id, err)
	}
	return nil
}

// closedKeys are closedScript's keys for call id.
func (s *store) closedKeys(id string) []string {
	return []string{s.callKey(id), s.auditKey(), s.unreleasedKey()}
}

// markUndeliverable closes an approved call that cannot be released, its
// caller answered code with reason instead (see closedScript).
func (s *store) markUndeliverable(ctx context.Context, id string, code windlass.ErrorCode, reason string) error {
	if err := closedScript.Run(ctx, s.rc, s.closedKeys(id), id, "undeliverable", string(code), "code", string(code), "reason", reason).Err(); err != nil {
		return fmt.Errorf("approval: mark %q undeliverable: %w", id, err)
	}
	return nil
}

// unanswered returns up to count calls decided against (rejected,
// expired, canceled) by before whose callers' answers are not known to be
// stored: the answer sweep's work, from an index, as unreleased. An id
// whose call is gone (past the retention) leaves the index.
func (s *store) unanswered(ctx context.Context, before time.Time, count int64) ([]*HeldCall, error) {
	ids, err := s.rc.ZRangeByScore(ctx, s.unansweredKey(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(before.UnixMilli(), 10), Count: count}).Result()
	if err != nil {
		return nil, fmt.Errorf("approval: unanswered calls: %w", err)
	}
	out := make([]*HeldCall, 0, len(ids))
	for _, id := range ids {
		h, err := s.get(ctx, id)
		switch {
		case errors.Is(err, errNotFound):
			s.rc.ZRem(ctx, s.unansweredKey(), id)
		case err != nil:
			return out, err
		default:
			out = append(out, h)
		}
	}
	return out, nil
}

// answered takes id out of the unanswered index: its caller's answer is
// stored.
func (s *store) answered(ctx context.Context, id string) error {
	if err := s.rc.ZRem(ctx, s.unansweredKey(), id).Err(); err != nil {
		return fmt.Errorf("approval: mark %q answered: %w", id, err)
	}
	return nil
}

// unreleased returns up to count approved calls not released yet, the
// longest waiting first: the release sweep's work, read from an index
// (the unreleased set), never from the history of approved calls. An id
// whose call is gone (past the retention) leaves the index.
func (s *store) unreleased(ctx context.Context, count int64) ([]*HeldCall, error) {
	ids, err := s.rc.ZRange(ctx, s.unreleasedKey(), 0, count-1).Result()
	if err != nil {
		return nil, fmt.Errorf("approval: unreleased calls: %w", err)
	}
	out := make([]*HeldCall, 0, len(ids))
	for _, id := range ids {
		h, err := s.get(ctx, id)
		switch {
		case errors.Is(err, errNotFound):
			s.rc.ZRem(ctx, s.unreleasedKey(), id)
		case err != nil:
			return out, err
		case h.Released: // released by a replica since the read above
		default:
			out = append(out, h)
		}
	}
	return out, nil
}

// decidedStatuses are the states a call ends in.
var decidedStatuses = []Status{StatusApproved, StatusRejected, StatusExpired, StatusCanceled}

// trimBatch bounds the calls one retention pass deletes per status.
const trimBatch = 500

// trim deletes what is past the retention: the calls decided before
// cutoff (their hashes and their entries in the status sets, a batch per
// status and pass) and the audit and webhook log entries written before
// it. It returns how many calls it deleted.
func (s *store) trim(ctx context.Context, cutoff time.Time) (int, error) {
	ms := strconv.FormatInt(cutoff.UnixMilli(), 10)
	deleted := 0
	var errs []error
	for _, st := range decidedStatuses {
		ids, err := s.rc.ZRangeByScore(ctx, s.statusKey(st), &redis.ZRangeBy{Min: "-inf", Max: "(" + ms, Count: trimBatch}).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(ids) == 0 {
			continue
		}
		// One key a command: in a Redis Cluster the calls are on many slots.
		pipe := s.rc.Pipeline()
		for _, id := range ids {
			pipe.Unlink(ctx, s.callKey(id))
			pipe.Unlink(ctx, s.bodyKey(id))
		}
		pipe.ZRem(ctx, s.statusKey(st), toAny(ids)...)
		if _, err := pipe.Exec(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted += len(ids)
	}
	for _, key := range []string{s.auditKey(), s.webhooksKey()} {
		if err := s.rc.XTrimMinID(ctx, key, ms).Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return deleted, fmt.Errorf("approval: retention: %w", err)
	}
	return deleted, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// errNotFound is returned by get for an id never held.
var errNotFound = errors.New("approval: no such held call")

// get reads one held call.
func (s *store) get(ctx context.Context, id string) (*HeldCall, error) {
	read := s.read(ctx, []string{id})
	m, err := read(0)
	if err != nil {
		return nil, fmt.Errorf("approval: get %q: %w", id, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%w: %q", errNotFound, id)
	}
	return decodeHeld(id, m)
}

// read fetches the calls ids, state and bulk, in one pipeline (over
// several slots in a Redis Cluster); the function it returns gives the
// fields of the i-th call, none for a call not held.
func (s *store) read(ctx context.Context, ids []string) func(i int) (map[string]string, error) {
	pipe := s.rc.Pipeline()
	state := make([]*redis.MapStringStringCmd, len(ids))
	body := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		state[i] = pipe.HGetAll(ctx, s.callKey(id))
		body[i] = pipe.HGetAll(ctx, s.bodyKey(id))
	}
	if len(ids) > 0 {
		_, _ = pipe.Exec(ctx) // each command's error is its own
	}
	return func(i int) (map[string]string, error) {
		m, err := state[i].Result()
		if err != nil || len(m) == 0 {
			return nil, err
		}
		b, err := body[i].Result()
		if err != nil {
			return nil, err
		}
		for k, v := range b {
			m[k] = v
		}
		return m, nil
	}
}

func decodeHeld(id string, m map[string]string) (*HeldCall, error) {
	h := &HeldCall{ID: id, Tool: m["tool"], Arguments: json.RawMessage(m["args"]), ArgsHash: m["args_hash"],
		SpecHash: m["spec_hash"], Requester: m["requester"], Status: Status(m["status"]), Reason: m["reason"],
		RejectedBy: m["rejected_by"], Released: m["released"] == "1", Undeliverable: windlass.ErrorCode(m["undeliverable"]), origin: m["origin"], traceparent: m["traceparent"],
		NoRetry: m["no_retry"] == "1", ReviewerGroups: []string{}}
	if m["reviewer_groups"] != "" {
		h.ReviewerGroups = strings.Split(m["reviewer_groups"], ",")
	}
	if m["args_ref"] != "" {
		h.ArgumentsRef, h.ArgumentsPreview = new(windlass.PayloadRef), m["args_preview"]
		if err := json.Unmarshal([]byte(m["args_ref"]), h.ArgumentsRef); err != nil {
			return nil, fmt.Errorf("approval: held call %q: args_ref: %w", id, err)
		}
		h.Arguments = nil
	}
	if m["approved_args"] != "" {
		h.ApprovedArguments = json.RawMessage(m["approved_args"])
	}
	if m["approvers"] != "" {
		h.Approvers = strings.Split(m["approvers"], ",")
	}
	h.RequiredApprovals, _ = strconv.Atoi(m["required"])
	h.RequestedAt = msTime(m["requested_ms"])
	h.ExpiresAt = msTime(m["expires_ms"])
	h.DecidedAt = msTime(m["decided_ms"])
	if m["metadata"] != "" && m["metadata"] != "null" {
		_ = json.Unmarshal([]byte(m["metadata"]), &h.Metadata)
	}
	h.callJSON = m["call"] // decoded only to release or answer the call, not to list it
	return h, nil
}

// toolCall is the held call as it was submitted. A call that cannot be
// decoded gives an error and a call carrying only the id and the tool, to
// answer its caller with.
func (h *HeldCall) toolCall() (windlass.ToolCall, error) {
	if h.call != nil {
		return *h.call, nil
	}
	var c windlass.ToolCall
	if err := wirejson.Decode([]byte(h.callJSON), &c); err != nil {
		return windlass.ToolCall{ID: h.ID, Name: h.Tool}, fmt.Errorf("approval: held call %q: decode call: %w", h.ID, err)
	}
	h.call = &c
	return c, nil
}

func msTime(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// list returns held calls of one status, newest first, from offset.
func (s *store) list(ctx context.Context, st Status, offset, limit int64) ([]*HeldCall, error) {
	ids, err := s.rc.ZRevRange(ctx, s.statusKey(st), offset, offset+limit-1).Result()
	if err != nil {
		return nil, fmt.Errorf("approval: list %s: %w", st, err)
	}
	read := s.read(ctx, ids)
	out := make([]*HeldCall, 0, len(ids))
	for i, id := range ids {
		m, err := read(i)
		if err != nil {
			return nil, fmt.Errorf("approval: list %s: %w", st, err)
		}
		if len(m) > 0 {
			h, err := decodeHeld(id, m)
			if err != nil {
				return nil, err
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// AuditEvent is one entry of the append-only audit log, as the API and
// windlass approvals audit print it.
type AuditEvent struct {
	// ID is the Redis stream entry id (time-ordered): the cursor of
	// GET /v1/audit?after=.
	ID string `json:"id"`
	// Time is when the entry was written (from its id, to the
	// millisecond).
	Time time.Time `json:"time"`
	// Event is requested, approval, edited, approved, rejected, expired,
	// canceled, released or undeliverable (approved, never released: its
	// caller was answered instead; fields code and reason).
	Event string `json:"event"`
	// CallID is the held call.
	CallID string `json:"call_id"`
	// Actor is the reviewer, the requester, "caller" (the caller canceled
	// the call) or "system" (expired, released, undeliverable).
	Actor string `json:"actor"`
	// Fields holds the event's other fields (reason, before, after).
	Fields map[string]string `json:"fields,omitempty"`
}

// audit reads up to count entries of the audit log: from the start, from
// since (when not zero), or after the entry after (when not empty).
func (s *store) audit(ctx context.Context, since time.Time, after string, count int64) ([]AuditEvent, error) {
	start := "-"
	switch {
	case after != "":
		start = "(" + after
	case !since.IsZero():
		start = strconv.FormatInt(since.UnixMilli(), 10)
	}
	msgs, err := s.rc.XRangeN(ctx, s.auditKey(), start, "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("approval: audit: %w", err)
	}
	out := make([]AuditEvent, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, auditEvent(m))
	}
	return out, nil
}

func auditEvent(m redis.XMessage) AuditEvent {
	ev := AuditEvent{ID: m.ID, Time: auditTime(m.ID), Fields: map[string]string{}}
	for k, v := range m.Values {
		sv, _ := v.(string)
		switch k {
		case "event":
			ev.Event = sv
		case "call_id":
			ev.CallID = sv
		case "actor":
			ev.Actor = sv
		default:
			ev.Fields[k] = sv
		}
	}
	return ev
}

// auditTime is the time of an audit entry from its stream id.
func auditTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	return msTime(ms)
}

// refusalLua defines refusedBy(claim, seq), true when an id's claim is
// the refusal of the message at seq ("<seq> <code>"; a waiting message's
// claim is "<seq>" alone): the one reading of a claim, shared by
// bodyScript and claimScript.
const refusalLua = `
local function refusedBy(claim, seq)
  return string.sub(claim, 1, #seq + 1) == seq .. ' '
end
`

// claimScript claims an id for a message that does not hold it, unless
// the id is held (its body is written) or another message claimed it.
// A body written from this very message (its intake_seq; not for the
// sequence 0 of unreadable metadata) is its own hold, interrupted before
// its state or finished: 'own', unless ARGV[3] is '1', which gives the
// body up (deletes it) and claims the id in its place — for a refusal of
// the message whose hold never finished (see refuseUnheld).
// A refusal's claim records its code after the sequence ("<seq> <code>"):
// that message was answered, and bodyScript never writes its body, not
// even on its own redelivery (one that comes before its Term, or after a
// Term lost); a waiting message's claim (the sequence alone) lets its own
// hold write it. A claim once a refusal's stays one, and a message's own
// claim is never shortened: a redelivery's wait, computed again, may have
// ended long before its refusal's answer (see awaitBound).
// KEYS: the body, the claim. ARGV: the message's sequence, the claim's
// time to live (ms), '1' to give up the message's own body, the refusal's
// code (empty for a waiting message). It returns 'claimed' (also when this
// message had), 'held', 'own' or 'taken'.
var claimScript = redis.NewScript(refusalLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  if ARGV[1] == '0' or redis.call('HGET', KEYS[1], 'intake_seq') ~= ARGV[1] then return 'held' end
  if ARGV[3] ~= '1' then return 'own' end
  redis.call('DEL', KEYS[1])
end
local by = redis.call('GET', KEYS[2])
local refused = by and refusedBy(by, ARGV[1])
if by and by ~= ARGV[1] and not refused then return 'taken' end
local v = ARGV[1]
if ARGV[4] ~= '' then v = ARGV[1] .. ' ' .. ARGV[4] elseif refused then v = by end
local ttl = tonumber(ARGV[2])
if by then ttl = math.max(ttl, redis.call('PTTL', KEYS[2])) end
redis.call('SET', KEYS[2], v, 'PX', ttl)
return 'claimed'
`)

// claim outcomes ("taken", another message claimed the id, is not
// told apart by its callers).
const (
	claimed = "claimed" // the message at seq holds the claim (now, or already)
	isHeld  = "held"    // a call of the id is held: no message may claim it
	isOwn   = "own"     // the id's body is this message's: its hold, interrupted or finished
)

// claim takes the id for the message at stream sequence seq, which does
// not hold it, for ttl (or what is left of its claim already, if longer):
// one waiting for its tool's bound (until the wait ends), or one refused,
// before it answers the id. A held call's body and
// a claim exclude each other atomically (bodyScript checks the claim), so
// a call of the id is never held while its caller is answered by another
// message, nor answered while held; nor does another message of the id
// take a waiting call's place.
// With giveUpOwn, a body of the message's own hold (one whose state was
// never written: the caller checked) is deleted and the id claimed.
// refusal is the code a refused message answers with; "" for a waiting
// one.
func (s *store) claim(ctx context.Context, id string, seq uint64, ttl time.Duration, giveUpOwn bool, refusal windlass.ErrorCode) (string, error) {
	ttl = max(ttl, time.Second)
	got, err := claimScript.Run(ctx, s.rc, []string{s.bodyKey(id), s.claimKey(id)}, seq, ttl.Milliseconds(), boolField(giveUpOwn), string(refusal)).Text()
	if err != nil {
		return "", fmt.Errorf("approval: claim %q: %w", id, err)
	}
	return got, nil
}
