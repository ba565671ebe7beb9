package dispatcher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/wirejson"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// CallOption configures one call.
type CallOption func(*callOptions)

type callOptions struct {
	id            string
	timeout       time.Duration
	deadline      time.Time
	metadata      map[string]string
	specHash      string
	style         windlass.Style
	allowNoWorker bool
	key           string
	detached      bool // Submit: the caller does not wait for the answer here
	newID         bool // id is one the caller generated for a new call (WithNewCallID)
}

// detached marks a call its caller does not wait for (see Submit).
func detached(o *callOptions) { o.detached = true }

// WithCallID sets the call id, for instance the model's own tool-call id,
// which makes a retried submit idempotent. Default: a new random id.
func WithCallID(id string) CallOption {
	return func(o *callOptions) { o.id, o.newID = id, false }
}

// WithNewCallID sets the id of a new call that the caller generated
// ([windlass.NewCallID]) to name the call before Submit or Call returns
// (the MCP server announces it at once). Unlike [WithCallID] it names no
// call submitted before: it is not looked up as a resubmit, and a refusal
// is answered as for a call without an id.
func WithNewCallID(id string) CallOption {
	return func(o *callOptions) { o.id, o.newID = id, true }
}

// WithTimeout sets the call's deadline to now plus d.
func WithTimeout(d time.Duration) CallOption { return func(o *callOptions) { o.timeout = d } }

// WithDeadline sets the call's absolute deadline.
func WithDeadline(t time.Time) CallOption { return func(o *callOptions) { o.deadline = t } }

// WithMetadata attaches caller metadata (requester, session) to the call.
func WithMetadata(m map[string]string) CallOption { return func(o *callOptions) { o.metadata = m } }

// WithSpecHash pins the spec version the model saw (from [Dispatcher.Catalog]):
// a call pinned to a version the fleet no longer serves is refused before
// it is queued, with a [*SpecMismatchError] (code spec_mismatch) carrying
// the tool as it is now, and a worker with another version (one the
// dispatcher's view has not caught up with yet) answers spec_mismatch
// instead of running arguments meant for another schema. Default: the
// version in the dispatcher's view at call time.
func WithSpecHash(h string) CallOption { return func(o *callOptions) { o.specHash = h } }

// WithStyle names the provider format the caller's model sees the tools in
// (as [Dispatcher.Tools] renders them): a spec_mismatch refusal shows the
// tool's current definition in it. Default: [windlass.DefaultStyle].
func WithStyle(s windlass.Style) CallOption { return func(o *callOptions) { o.style = s } }

// SpecMismatchError refuses a call pinned with [WithSpecHash] to a version
// of the tool's spec the fleet no longer serves: the model saw another
// schema, and nothing was queued. It carries the tool as it is now, to
// show the model before it calls again. Its code and message are those of
// the *windlass.CallError it unwraps to (code spec_mismatch), whose
// message holds the tool's current definition in the caller's style.
type SpecMismatchError struct {
	// Pinned is the spec hash the call was made for.
	Pinned string
	// Current is the tool's spec now.
	Current windlass.Spec
	// CurrentHash is Current's hash: the pin to call it with.
	CurrentHash string
	// Style is the caller's style ([WithStyle]), the one Definition renders.
	Style windlass.Style

	err *windlass.CallError
}

// newSpecMismatch builds the refusal of a call pinned to pinned.
func newSpecMismatch(pinned string, info registry.ToolInfo, style windlass.Style) *SpecMismatchError {
	e := &SpecMismatchError{Pinned: pinned, Current: info.Spec, CurrentHash: info.Hash, Style: cmp.Or(style, windlass.DefaultStyle)}
	def := "(it cannot be shown in that style)"
	if d, err := e.Definition(); err == nil {
		b, _ := json.Marshal(d)
		def = string(b)
	}
	e.err = &windlass.CallError{Code: windlass.CodeSpecMismatch, Message: fmt.Sprintf(
		"Tool %q changed since the model saw it: the call was made for spec %s, the fleet now serves spec %s; it was not run. Its current definition (%s): %s. Call it again with arguments for this definition (spec_hash %s).",
		info.Spec.Name, pinned, info.Hash, e.Style, def, info.Hash)}
	return e
}

// Definition is the tool's current definition in the caller's style, as
// [Dispatcher.Tools] lists it.
func (e *SpecMismatchError) Definition() (map[string]any, error) { return e.Current.Schema(e.Style) }

// Error implements error, as the unwrapped *windlass.CallError.
func (e *SpecMismatchError) Error() string { return e.err.Error() }

// Unwrap returns the refusal as a *windlass.CallError, code spec_mismatch.
func (e *SpecMismatchError) Unwrap() error { return e.err }

// AllowNoWorker queues the call even when no live worker serves the tool;
// one started before the deadline will run it.
func AllowNoWorker() CallOption { return func(o *callOptions) { o.allowNoWorker = true } }

// prepared is a call checked and encoded, ready to publish. One
// allocation holds it all, the options and the message included.
type prepared struct {
	call     windlass.ToolCall
	subject  string
	msg      nats.Msg
	ownID    bool        // the caller chose the id: a resubmit must be recognised
	gated    bool        // published for the approval service, not the tool
	large    []byte      // arguments too large for the message: they go by reference
	argsHash string      // the arguments' canonical hash
	opts     callOptions // as the caller set them
	counted  *counted    // its count in the metrics; nil: metrics off, or counted by another submit
	held     *heldSlot   // its slot under the limits' caps; nil: none taken here
	resubmit bool        // a resubmit prepare recognised (see resubmitted): nothing to publish
}

// prepare checks a call against the view and encodes it. A refusal is a
// *windlass.CallError with the code of the result the caller should see.
// A call id the caller chose that the fleet accepted before is that call
// even when the fleet as it is now would refuse it (see resubmitted).
func (d *Dispatcher) prepare(ctx context.Context, name string, args any, opts []CallOption) (*prepared, error) {
	p, err := d.prepareNew(ctx, name, args, opts)
	var refusal *windlass.CallError
	if err == nil || !errors.As(err, &refusal) || !slices.Contains(refusedAsItIsNow, refusal.Code) {
		return p, err
	}
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.id == "" || o.newID || windlass.ValidateCallID(o.id) != nil {
		return nil, err
	}
	if again, cerr := d.resubmitted(ctx, name, args, o, err); again != nil || cerr != nil {
		return again, cerr
	}
	return nil, err
}

// refusedAsItIsNow are the refusals that depend on the fleet as it is at
// the submit (the tools advertised, their specs and schemas, the workers
// alive), not on the call: a call accepted before may be refused so now.
var refusedAsItIsNow = []windlass.ErrorCode{windlass.CodeUnknownTool, windlass.CodeSpecMismatch,
	windlass.CodeNoWorker, windlass.CodeInvalidArguments, windlass.CodeUnavailable}

// resubmitted is the resubmit of a call id the caller chose that the fleet
// accepted before, which a check of the fleet as it is now refused (the
// tool redeployed with another spec or schema, its workers gone for a
// moment): one id is one call, and that call was accepted — it may have
// run — so its caller is answered as any resubmit is, with that call's
// result, never told it was not run. The same id with another tool or
// other arguments is id_conflict, as always. Nil, nil when the id has no
// record (or the arguments do not encode): the refusal stands. When the
// streams cannot say whether it has one, the caller is told so
// (unavailable, wrapping ErrUnavailable), not refused as if it had none.
//
// The arguments are hashed only for an id that has a record, and only
// within the tool's bound on values (the default's, at least, when the
// tool is gone): hashing may decode them (release.ArgumentsHashWithin),
// which refused arguments, unbounded by any schema, must not make the
// dispatcher do at the caller's will. Beyond the bound the refusal stands:
// arguments of more values were not accepted before unless the tool's own
// bound was higher then.
func (d *Dispatcher) resubmitted(ctx context.Context, name string, args any, o callOptions, refused error) (*prepared, error) {
	k, err := retry.Value(ctx, recordReadPolicy, func(ctx context.Context) (known, error) { return d.find(ctx, o.id) })
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, &windlass.CallError{Code: windlass.CodeUnavailable, Message: fmt.Sprintf(
			"Call id %q may name a call the fleet accepted before, and whether it does could not be read (%v); as the fleet is now, a new call would be refused: %v. Ask for the call's status, or submit it again later.",
			o.id, err, refused)})
	}
	if !k.found {
		return nil, nil
	}
	raw, err := windlass.EncodeArguments(args)
	if err != nil {
		return nil, nil
	}
	bound := windlass.DefaultMaxArgumentValues
	if info, _, ok := d.view.Tool(name); ok {
		bound = max(bound, info.Spec.ArgumentValueLimit()) // its calls were accepted within it
	}
	hash, err := release.ArgumentsHashWithin(raw, bound)
	if err != nil {
		return nil, nil
	}
	rec := k.rec
	p := &prepared{opts: o, ownID: true, argsHash: hash, resubmit: true,
		subject: layout.CallSubject(name, o.id), msg: nats.Msg{Header: nats.Header{}}}
	p.call = windlass.ToolCall{ID: o.id, Name: name, Key: o.key, Metadata: o.metadata,
		Deadline: d.deadline(ctx, o, windlass.Spec{Timeout: windlass.DefaultTimeout}, false)}
	if p.call.Key == limits.DefaultKey {
		p.call.Key = ""
	}
	if err := conflict(p, rec); err != nil {
		return nil, err
	}
	return p, nil
}

// prepareNew is prepare of a call as the fleet is now.
func (d *Dispatcher) prepareNew(ctx context.Context, name string, args any, opts []CallOption) (*prepared, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	p := new(prepared)
	o := &p.opts
	for _, opt := range opts {
		opt(o)
	}
	if err := windlass.ValidateName(name); err != nil {
		return nil, &windlass.CallError{Code: windlass.CodeInvalidCall, Message: fmt.Sprintf("Tool name: %v", err)}
	}
	call := windlass.ToolCall{ID: o.id, Name: name, Metadata: o.metadata}
	if o.key != "" && o.key != limits.DefaultKey {
		if err := limits.ValidateKey(o.key); err != nil {
			return nil, &windlass.CallError{Code: windlass.CodeInvalidCall, Message: fmt.Sprintf("Key: %v", err)}
		}
		call.Key = o.key
	}
	if call.ID == "" {
		call.ID = windlass.NewCallID()
	} else if err := windlass.ValidateCallID(call.ID); err != nil {
		return nil, &windlass.CallError{Code: windlass.CodeInvalidCall, Message: err.Error()}
	}
	info, asOf, ok := d.view.Tool(name)
	if !ok {
		return nil, &windlass.CallError{Code: windlass.CodeUnknownTool, Message: fmt.Sprintf("Unknown tool %q: no worker has ever advertised it.", name)}
	}
	if o.specHash != "" && o.specHash != info.Hash {
		return nil, newSpecMismatch(o.specHash, info, o.style)
	}
	if !o.allowNoWorker && !info.HasLiveWorker(asOf) {
		return nil, &windlass.CallError{Code: windlass.CodeNoWorker, Message: fmt.Sprintf("Tool %q has no live worker right now.", name)}
	}
	raw, err := windlass.EncodeArguments(args)
	if err != nil {
		return nil, &windlass.CallError{Code: windlass.CodeInvalidArguments, Message: fmt.Sprintf("arguments: %v", err)}
	}
	schema, err := d.schema(info.Spec, info.Hash)
	if err != nil {
		return nil, &windlass.CallError{Code: windlass.CodeUnavailable, Message: err.Error()}
	}
	if err := schema.Validate(raw); err != nil {
		// Word it exactly as the tool itself would have.
		return nil, &windlass.CallError{Code: windlass.CodeInvalidArguments, Message: windlass.ResultFromError(call, err).Content}
	}
	call.Arguments = raw
	gated := d.gated(ctx, info.Spec, call.ID, raw)
	// A resubmit of this id must be this call: same tool, same arguments
	// (see conflict). Every call records its arguments' hash, a generated
	// id too: a caller learns it (Submit returns it) and may submit it as
	// its own, which is the same call only with the same arguments.
	if p.argsHash, err = release.ArgumentsHash(raw); err != nil {
		return nil, &windlass.CallError{Code: windlass.CodeInvalidArguments, Message: fmt.Sprintf("arguments: %v", err)}
	}
	call.SpecHash = info.Hash // the pin, if any, is this
	call.Deadline = d.deadline(ctx, *o, info.Spec, gated)
	if call.Deadline.Year() > 9999 {
		return nil, &windlass.CallError{Code: windlass.CodeInvalidCall, Message: fmt.Sprintf(
			"deadline: %s is past what the protocol encodes (RFC 3339: before the year 10000)", call.Deadline.UTC().Format(time.DateOnly))}
	}

	encoded, unencoded := call, 0
	if int64(len(raw)) > d.inline {
		// Over the inline limit whatever the rest: not copied into a
		// message that would not be sent (see byReference).
		encoded.Arguments, unencoded = nil, len(raw)
	}
	data, err := encodeCall(encoded)
	if err != nil {
		return nil, &windlass.CallError{Code: windlass.CodeInvalidArguments, Message: fmt.Sprintf("encode call: %v", err)}
	}
	subject := d.subject(name, call.ID, gated)
	p.msg = nats.Msg{Subject: subject, Data: data, Header: nats.Header{
		nats.MsgIdHdr:         []string{call.ID},
		layout.HeaderOrigin:   d.originHeader, // shared, never modified
		layout.HeaderProtocol: protocolHeader,
	}}
	if p.argsHash != "" {
		p.msg.Header[layout.HeaderArgsHash] = []string{p.argsHash}
	}
	size := layout.MessageSize(&p.msg) + unencoded
	if d.tracer.Enabled() {
		size += traceHeaderReserve // traceparent, injected by publish
	}
	if d.admission.enforcer != nil && o.detached {
		size += slotHeaderReserve // set by publish if admission takes a slot
	}
	if gated {
		size += release.Reserve // the approval service publishes it again, with its release
	}
	if int64(size) > d.inline {
		// Too large for a message: the arguments go by reference (see
		// byReference), up to the limit.
		if int64(len(raw)) > d.cfg.PayloadLimit {
			return nil, &windlass.CallError{Code: windlass.CodePayloadTooLarge, Message: fmt.Sprintf(
				"The arguments of the call to %q are %d bytes, over the fleet's limit of %d bytes for arguments; nothing was stored.", name, len(raw), d.cfg.PayloadLimit)}
		}
		p.large = raw
	}
	p.call, p.subject, p.ownID, p.gated = call, subject, o.id != "" && !o.newID, gated
	return p, nil
}

var protocolVersion = fmt.Sprint(windlass.ProtocolVersion)

// protocolHeader is the value of every call's protocol header; shared by
// every message, so never modified.
var protocolHeader = []string{protocolVersion}

// subject returns the subject a call is published on: its own under the
// tool's calls, or the tool's approvals subject for a gated tool (built
// once per tool).
func (d *Dispatcher) subject(tool, callID string, gated bool) string {
	if !gated {
		return layout.CallSubject(tool, callID)
	}
	if s, ok := d.approvalSubjects.Load(tool); ok {
		return s.(string)
	}
	s := layout.ApprovalSubject(tool)
	d.approvalSubjects.Store(tool, s)
	return s
}

// deadline picks the call's absolute deadline.
func (d *Dispatcher) deadline(ctx context.Context, o callOptions, spec windlass.Spec, gated bool) time.Time {
	switch {
	case !o.deadline.IsZero():
		return o.deadline
	case o.timeout > 0:
		return time.Now().Add(o.timeout)
	}
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	bound := spec.Timeout + d.cfg.QueueAllowance
	if gated {
		bound += d.cfg.ApprovalWait // a human decides first
	}
	return time.Now().Add(bound)
}

// gated decides whether a call goes to the approval service: every call
// of a tool that requires approval, and the calls its approval condition
// holds for. A condition that cannot be evaluated on the arguments gates
// the call (fail closed): a person decides, where a guess could run a call
// that needed approval (its worker would refuse it anyway; see
// worker.admitGated).
func (d *Dispatcher) gated(ctx context.Context, spec windlass.Spec, callID string, args json.RawMessage) bool {
	gated, err := spec.NeedsApproval(args)
	if err != nil {
		d.cfg.Logger.InfoContext(ctx, "dispatcher: the approval condition has no answer on the call's arguments; sending it for approval", "call_id", callID, "tool", spec.Name, "error", err)
	}
	return gated
}

// schema returns the compiled arguments schema of a spec version, compiling
// it once.
func (d *Dispatcher) schema(spec windlass.Spec, hash string) (*windlass.ArgumentsSchema, error) {
	if s, ok := d.schemas.Load(hash); ok {
		return s.(*windlass.ArgumentsSchema), nil
	}
	s, err := windlass.CompileArguments(spec)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: tool %q: %w", spec.Name, err)
	}
	d.schemas.Store(hash, s)
	return s, nil
}

// publish sends a prepared call durably; the stream deduplicates by call
// id. duplicate reports that a call with this id was already accepted (a
// retried submit), whose result goes wherever the first submit asked. A
// call id the caller chose is also looked up first (see find: the call's
// message, its result, its queued event), which remembers accepted calls
// as long as results, well beyond the stream's duplicate window. A gated
// call gets its queued event, stored before publish returns: its message
// goes to the approval service, so the calls stream does not hold it.
func (d *Dispatcher) publish(ctx context.Context, p *prepared) (duplicate bool, err error) {
	ctx, span := d.startSend(ctx, p)
	defer func() { endSend(span, err); d.published(p, duplicate, err) }()
	if p.resubmit {
		// Its record was found and matched (resubmitted): looked up
		// again, a read that fails now, or a wait already past its
		// deadline, would leave it the refusal that call never deserved.
		return true, nil
	}
	if p.ownID {
		if rec, ok := d.recordOf(ctx, p.call.ID, false); ok {
			return true, conflict(p, rec)
		}
	}
	if err := d.admit(ctx, p); err != nil {
		return false, err
	}
	if p.held != nil && p.opts.detached {
		// Its caller may be gone when its answer comes (a CLI's call
		// --async): whoever stores the answer frees the slot too.
		p.msg.Header[layout.HeaderSlot] = slotHeldHeader
	}
	// Never try to publish past the call's own deadline (Call's ctx ends
	// there already).
	pubCtx := ctx
	if dl, ok := ctx.Deadline(); !ok || dl.After(p.call.Deadline) {
		var cancel context.CancelFunc
		pubCtx, cancel = context.WithDeadline(ctx, p.call.Deadline)
		defer cancel()
	}
	if p.large != nil {
		if err := d.byReference(pubCtx, p); err != nil {
			d.unadmit(p)
			return false, err
		}
	}
	queuedAt := time.Now() // before any worker can take the call
	ack, retried, err := d.publishDurably(pubCtx, &p.msg)
	if errors.Is(err, errUnconfirmed) {
		// It may be queued: its slot is kept (it lapses after the call's
		// deadline) and so is the upload its arguments point at.
		return false, unconfirmedCall{&windlass.CallError{Code: windlass.CodeUnavailable, Message: fmt.Sprintf(
			"The fleet did not confirm that it accepted call %q to %q (%v): it may be queued and may run. Ask for its status, or submit it again with this call id: the same id is the same call, run once.",
			p.call.ID, p.call.Name, err)}}
	}
	if err != nil || ack.Duplicate && !retried {
		// Not stored, or the call stored under this id is another submit's,
		// which took its own slot or none.
		d.unadmit(p)
	}
	if errors.Is(err, errQueueFull) {
		if p.call.ArgumentsRef != nil {
			d.payloads.Delete(ctx, *p.call.ArgumentsRef) // certainly not stored: nothing points at it
		}
		d.metrics.Limited(ctx, p.call.Name, p.key(), string(limits.ReasonCallsStream))
		return false, d.overloaded(p)
	}
	if err != nil {
		return false, &windlass.CallError{Code: windlass.CodeUnavailable, Message: fmt.Sprintf("The fleet could not accept the call: %v", err)}
	}
	if ack.Duplicate && !retried && p.call.ArgumentsRef != nil {
		// The stored call is another submit's, which points at its own
		// upload, not this one. After a retry it may be this publish's
		// own earlier attempt, stored with its acknowledgement lost,
		// pointing at this upload: that one is kept (the bucket's lifetime
		// removes it if nothing points at it).
		d.payloads.Delete(ctx, *p.call.ArgumentsRef)
	}
	switch {
	case !ack.Duplicate && p.gated:
		if q, taken := d.publishQueued(ctx, p, queuedAt); taken && conflict(p, recordFromEvent(q)) != nil {
			// A record of another call with this id, older than the
			// duplicate window, that the look-up before the publish
			// missed (the stream unreadable then). This call is accepted
			// and will run: say so, and keep the other's record.
			d.cfg.Logger.WarnContext(ctx, "dispatcher: accepted a call whose id an older call with other arguments used; its queued record stays the older call's", "call_id", p.call.ID)
		}
		return false, nil
	case !ack.Duplicate:
		return false, nil // the call's message is its record
	case retried && p.gated:
		// Most likely this publish's own earlier attempt, stored but not
		// acknowledged. But another submit of the id may have come first:
		// its record, written create-only, says which call is stored.
		if q, taken := d.publishQueued(ctx, p, queuedAt); taken {
			return true, conflict(p, recordFromEvent(q))
		}
		return p.ownID, nil
	case retried:
		// Most likely this publish's own earlier attempt; the stored
		// message says whether it is this call.
		if rec, ok := d.recordOf(ctx, p.call.ID, true); ok {
			if err := conflict(p, rec); err != nil {
				return true, err
			}
		}
		// A random id can only be ours; a caller's own id is still waited
		// for by id, in case another submit of it came first.
		return p.ownID, nil
	}
	// Another submit of this id, within the duplicate window, perhaps this
	// very moment on another instance: it is the same call only if it has
	// the same tool and arguments.
	if rec, ok := d.recordOf(ctx, p.call.ID, true); ok {
		return true, conflict(p, rec)
	}
	return true, nil
}

// byReference stores a call's arguments in the payloads bucket and makes
// its message point at them (see windlass.ToolCall.ArgumentsRef).
func (d *Dispatcher) byReference(ctx context.Context, p *prepared) error {
	ref, err := d.payloads.Put(ctx, layout.PayloadArguments, p.call.ID, p.large)
	if err != nil {
		return &windlass.CallError{Code: windlass.CodeUnavailable, Message: fmt.Sprintf("The fleet could not store the call's arguments: %v", err)}
	}
	call := p.call
	call.Arguments, call.ArgumentsRef = json.RawMessage(windlass.ArgumentsByReference), &ref
	data, err := json.Marshal(call)
	if err != nil {
		return &windlass.CallError{Code: windlass.CodeInvalidArguments, Message: fmt.Sprintf("encode call: %v", err)}
	}
	if err := d.overMaxPayload(p, data); err != nil {
		d.payloads.Delete(ctx, ref) // nothing will point at it
		return err
	}
	p.call.ArgumentsRef, p.msg.Data = &ref, data
	return nil
}

// conflict is the id_conflict refusal of a call whose id is taken by the
// call rec records: another tool, or other arguments (when both have a
// hash: a record of an older protocol's may not); nil when it is the same
// call.
func conflict(p *prepared, rec callRecord) error {
	var differs string
	switch {
	case rec.tool != "" && rec.tool != p.call.Name:
		differs = fmt.Sprintf("of tool %q, not %q", rec.tool, p.call.Name)
	case rec.argsHash != "" && p.argsHash != "" && rec.argsHash != p.argsHash:
		differs = fmt.Sprintf("of %q with other arguments (canonical SHA-256 %s, these %s)", p.call.Name, rec.argsHash, p.argsHash)
	default:
		return nil
	}
	accepted := ""
	if !rec.queuedAt.IsZero() {
		accepted = ", accepted at " + rec.queuedAt.UTC().Format(time.RFC3339)
	}
	return &windlass.CallError{Code: windlass.CodeIDConflict, Message: fmt.Sprintf(
		"Call id %q is taken by another call %s%s; it was not submitted again. Use a new id for a new call; the same id is the same call only with the same tool and arguments.",
		p.call.ID, differs, accepted)}
}

// publishAttempt bounds one attempt to publish a call. A publish whose
// acknowledgement was lost (the server went down after receiving it, or
// before) is sent again rather than waited on until the call's deadline:
// the stream deduplicates by call id, so a repeat is harmless.
const publishAttempt = 2 * time.Second

// publishDurably publishes m to its stream, trying again with backoff until
// the stream acknowledges it or ctx ends. retried reports that more than one
// attempt was made. An error wraps errUnconfirmed when an attempt may have
// stored m although no acknowledgement came (it timed out, or the
// connection or ctx ended while it waited).
func (d *Dispatcher) publishDurably(ctx context.Context, m *nats.Msg) (ack *jetstream.PubAck, retried bool, err error) {
	attempts, unconfirmed := 0, false
	ack, err = retry.Value(ctx, retry.Policy{Initial: 50 * time.Millisecond, Max: time.Second, PerAttempt: publishAttempt}, func(attemptCtx context.Context) (*jetstream.PubAck, error) {
		if attempts++; attempts > 1 {
			d.cfg.Logger.DebugContext(ctx, "dispatcher: publish not acknowledged; trying again", "subject", m.Subject, "attempt", attempts)
		}
		if d.cfg.Conn.IsClosed() {
			return nil, retry.Permanent(nats.ErrConnectionClosed) // not sent
		}
		if err := attemptCtx.Err(); err != nil {
			return nil, retry.Permanent(err) // not sent: nats.go sends nothing on a context that ended
		}
		ack, err := d.js.PublishMsg(attemptCtx, m)
		if err == nil {
			return ack, nil
		}
		if layout.IsCallsFull(err) {
			// Refused, not lost: nothing was stored, and asking again at
			// once only adds to the load that filled the stream.
			return nil, retry.Permanent(fmt.Errorf("%w: %w", errQueueFull, err))
		}
		if !notStored(err) {
			unconfirmed = true
		}
		if ctx.Err() != nil || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrMaxPayload) {
			return nil, retry.Permanent(err) // the caller gave up, or the same message never goes
		}
		return nil, err
	})
	if err != nil && unconfirmed {
		err = fmt.Errorf("%w: %w", errUnconfirmed, err)
	}
	return ack, attempts > 1, err
}

// notStored reports that a failed publish certainly stored nothing: the
// client refused to send it, no stream was there to take it, or the
// stream refused it. Two refusals of a replicated stream are not certain
// (nats-server v2.15): "duplicate message id is in process" (another
// publish of the id is being stored) and "store closed" (a leader that
// stopped after its replicas took the message).
func notStored(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		uncertain := api.ErrorCode == jsErrDuplicateInProcess ||
			api.ErrorCode == jsErrStoreFailed && api.Description == jsStoreClosed
		return !uncertain
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// The NATS server's uncertain refusals (see notStored): its errors
// JSStreamDuplicateMessageConflict, and JSStreamStoreFailedF with
// ErrStoreClosed.
const (
	jsErrDuplicateInProcess jetstream.ErrorCode = 10158
	jsErrStoreFailed        jetstream.ErrorCode = 10077
	jsStoreClosed                               = "store is closed"
)

// unconfirmedCall is publish's unavailable for a call that may be queued
// (see errUnconfirmed): Call's result and Submit give its id.
type unconfirmedCall struct{ *windlass.CallError }

func (u unconfirmedCall) Unwrap() error { return u.CallError }

// Is makes it an [ErrUnavailable]: the call may exist; ask again.
func (u unconfirmedCall) Is(target error) bool { return target == ErrUnavailable }

// errUnconfirmed marks a publish that failed after it may have been
// stored: the call may be queued, and may run.
var errUnconfirmed = errors.New("dispatcher: the publish was not confirmed")

// errQueueFull marks a publish the NATS server refused because the calls
// stream is at its bound (see layout.IsCallsFull).
var errQueueFull = errors.New("dispatcher: the calls stream is full")

// overloaded is the refusal of a call the calls stream had no room for:
// nothing of it was stored (publish deletes its arguments sent by
// reference), and its id may be used again.
func (d *Dispatcher) overloaded(p *prepared) *windlass.CallError {
	bound := "its bound"
	if n := d.callsBound; n > 0 {
		bound = fmt.Sprintf("its bound of %d calls", n)
	}
	return &windlass.CallError{Code: windlass.CodeOverloaded, Retryable: true, RetryAfterMS: limits.SlotRetryAfter.Milliseconds(),
		Message: fmt.Sprintf("The fleet's queue is full (%s queued or running, all tools together); the call to %q was not queued. Try again after %s.",
			bound, p.call.Name, limits.SlotRetryAfter)}
}

// Call runs a tool in the fleet and waits for its result, at most until the
// call's deadline. Every outcome the model should see — the tool's result,
// or a refusal (unknown_tool, no_worker, invalid_arguments,
// payload_too_large), a timeout, a publish failure (unavailable) — is
// returned as the result; err is non-nil only with a result that is an
// error too, when the dispatcher itself failed (closed, unavailable) or ctx
// ended, so a caller may simply use the result. An unavailable result
// that carries a CallID is about a call that may exist: its publish was
// not confirmed, or its deadline passed with its result unreadable; ask
// for that id's status or result later, or call again with [WithCallID].
//
// args is a JSON object: a json.RawMessage, []byte or string of JSON, or any
// value encoding to an object.
func (d *Dispatcher) Call(ctx context.Context, name string, args any, opts ...CallOption) (windlass.ToolResult, error) {
	p, err := d.prepare(ctx, name, args, opts)
	if err != nil {
		r, err := refusal(name, err)
		d.metrics.Refused(ctx, r, keyOf(opts))
		return r, err
	}
	d.count(ctx, p)
	r, err := d.call(ctx, p)
	d.finish(p, r) // its timeout or cancellation, unless its result came first
	return r, err
}

// call publishes a prepared call and waits for its result.
func (d *Dispatcher) call(ctx context.Context, p *prepared) (windlass.ToolResult, error) {
	name := p.call.Name
	// For a gated call too: the approval service never runs it past this
	// deadline (its release deadline is capped by it).
	waitCtx, cancel := context.WithDeadline(ctx, p.call.Deadline)
	defer cancel()
	ch := make(chan windlass.ToolResult, 1)
	if _, loaded := d.pending.LoadOrStore(p.call.ID, ch); loaded {
		// A Call of this id is in flight on this instance: a retry. It is
		// published too, not taken for published: the first may not have
		// been (refused, its publish failed), and the look-up before the
		// publish and the stream's deduplication make the two one call,
		// or refuse this one id_conflict. Either way it waits by id.
		ch = nil
	} else {
		defer d.pending.CompareAndDelete(p.call.ID, ch)
	}
	duplicate, err := d.publish(waitCtx, p)
	if err != nil {
		r, err := refusal(name, err)
		if errors.As(err, new(unconfirmedCall)) {
			r.CallID = p.call.ID // it may be queued: the caller may ask about it
		}
		return r, err
	}
	if duplicate || ch == nil {
		// Submitted before, maybe from another instance: its result may go
		// to that instance's subject, so wait for it by call id.
		if ch != nil {
			d.pending.CompareAndDelete(p.call.ID, ch)
		}
		r, err := d.Wait(waitCtx, p.call.ID)
		if err != nil {
			return d.timedOut(ctx, p.call)
		}
		return r, nil
	}
	select {
	case r := <-ch:
		if r, err = d.resolve(ctx, r); err != nil {
			return unfetched(p.call, err), err
		}
		return r, nil
	case <-d.done:
		return refusal(name, ErrClosed)
	case <-waitCtx.Done():
		return d.timedOut(ctx, p.call)
	}
}

// timedOut is the result of a call whose wait ended without a result. The
// stream is checked once more: the result may have raced the deadline.
// Only a stream that says it has no result makes it a timeout: one that
// cannot be read (the connection lost, a leader election) may hold the
// tool's answer, so the caller is told unavailable, to ask again. So is
// the caller of a call whose deadline, as stored when it was first
// submitted, is still ahead: a retry with less time left did not see it
// time out.
func (d *Dispatcher) timedOut(ctx context.Context, call windlass.ToolCall) (windlass.ToolResult, error) {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		r := windlass.ErrorResult(call, windlass.CodeCanceled, fmt.Sprintf("The call to %q was abandoned by its caller.", call.Name))
		return r, ctx.Err()
	}
	fetchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retry.ReadTimeout)
	defer cancel()
	r, err := d.Result(fetchCtx, call.ID)
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, ErrUnavailable):
		return unfetched(call, err), err // it has a result: not a timeout
	case errors.Is(err, ErrNoResult):
		k, err := d.find(fetchCtx, call.ID)
		switch {
		case err != nil:
			// The call's record says its deadline; unread, a retry of a
			// call submitted before with a later one cannot be told that
			// it timed out.
			r := windlass.ErrorResult(call, windlass.CodeUnavailable, fmt.Sprintf(
				"No result for call %q to %q before this wait's deadline, and its record, which says its own deadline, could not be read; ask for call %q again later: %v", call.ID, call.Name, call.ID, err))
			r.CallID = call.ID
			return r, fmt.Errorf("%w: no result for call %q, and its record could not be read: %w", ErrUnavailable, call.ID, err)
		case k.found && k.result == nil && k.rec.deadline.After(time.Now()):
			// A retry of a call submitted before with a later deadline (a
			// caller's own id): this wait ended at its own deadline, the
			// call has not, and may yet succeed.
			r := windlass.ErrorResult(call, windlass.CodeUnavailable, fmt.Sprintf(
				"The call %q to %q is still queued or running: its deadline, set when it was first submitted, is %s; this wait for it ended before. Ask for its status or result later.",
				call.ID, call.Name, k.rec.deadline.Format(time.RFC3339Nano)))
			r.CallID = call.ID
			return r, fmt.Errorf("%w: call %q is still queued or running (its deadline is %s)", ErrUnavailable, call.ID, k.rec.deadline.Format(time.RFC3339Nano))
		}
		return windlass.ErrorResult(call, windlass.CodeTimeout, fmt.Sprintf("Tool %q timed out: no result before the call's deadline (%s).", call.Name, call.Deadline.Format(time.RFC3339Nano))), nil
	}
	r = windlass.ErrorResult(call, windlass.CodeUnavailable, fmt.Sprintf(
		"The deadline of the call to %q passed and whether the tool answered could not be read; ask for call %q again later: %v", call.Name, call.ID, err))
	return r, fmt.Errorf("%w: the deadline of call %q passed and whether it was answered could not be read: %w", ErrUnavailable, call.ID, err)
}

// unfetched is the result of a call whose result exists but could not be
// fetched (its objects by reference): unavailable, not what the tool said.
func unfetched(call windlass.ToolCall, err error) windlass.ToolResult {
	return windlass.ErrorResult(call, windlass.CodeUnavailable, fmt.Sprintf(
		"Tool %q answered, but its result could not be fetched; ask for call %q again later: %v", call.Name, call.ID, err))
}

// refusal turns a pre-publish error into a result (and an error for the
// dispatcher's own failures).
func refusal(name string, err error) (windlass.ToolResult, error) {
	var ce *windlass.CallError
	if errors.As(err, &ce) {
		r := windlass.ErrorResult(windlass.ToolCall{Name: name}, ce.Code, ce.Message)
		r.Error.Retryable, r.Error.RetryAfterMS = ce.Retryable, ce.RetryAfterMS // a limit's advice
		if ce.Code == windlass.CodeUnavailable {
			return r, err
		}
		return r, nil
	}
	r := windlass.ErrorResult(windlass.ToolCall{Name: name}, windlass.CodeUnavailable, err.Error())
	return r, err
}

// Submit publishes a call and returns its id at once, for async and
// long-running tools. Fetch the result with [Dispatcher.Wait] or
// [Dispatcher.Result] on any dispatcher instance. A refusal is a
// *windlass.CallError carrying the result code (unknown_tool, no_worker,
// invalid_arguments, payload_too_large, unavailable). When the fleet may
// have taken the call but did not confirm it (the connection was lost
// while the publish waited for its acknowledgement), Submit returns the
// call's id with the unavailable error: the call may be queued; ask for
// its [Dispatcher.Status], or submit again with [WithCallID] and this id
// (the same id is the same call).
func (d *Dispatcher) Submit(ctx context.Context, name string, args any, opts ...CallOption) (string, error) {
	p, err := d.prepare(ctx, name, args, append(opts[:len(opts):len(opts)], detached))
	if err != nil {
		r, _ := refusal(name, err)
		d.metrics.Refused(ctx, r, keyOf(opts))
		return "", err
	}
	d.count(ctx, p) // until its result reaches this instance, whoever reads it
	if _, err := d.publish(ctx, p); err != nil {
		if errors.As(err, new(unconfirmedCall)) {
			return p.call.ID, err
		}
		return "", err
	}
	return p.call.ID, nil
}

// Result returns a call's result from the results stream, from whichever
// instance submitted it, or [ErrNoResult] when there is none yet. When a
// call was answered twice (a re-execution finished after the stream's
// duplicate window), the first answer is the result. The server hands a
// result to live subscribers (Call, Wait) a moment before the stream has
// stored it, so Result right after Wait returned may still say ErrNoResult
// for a millisecond.
func (d *Dispatcher) Result(ctx context.Context, callID string) (windlass.ToolResult, error) {
	if err := windlass.ValidateCallID(callID); err != nil {
		return windlass.ToolResult{}, fmt.Errorf("dispatcher: result: %w", err)
	}
	r, _, err := d.storedResult(ctx, callID)
	if err != nil {
		return r, err
	}
	return d.resolve(ctx, r)
}

// resolve fetches a result's content and value when they travel by
// reference (see payload.Store.Resolve). One that cannot be used is an
// error result saying why; one that cannot be fetched now is an error
// wrapping ErrUnavailable.
func (d *Dispatcher) resolve(ctx context.Context, r windlass.ToolResult) (windlass.ToolResult, error) {
	if r.ContentRef == nil && r.DataRef == nil {
		return r, nil
	}
	out, err := d.payloads.Resolve(ctx, r, d.cfg.PayloadLimit)
	if err != nil {
		return r, fmt.Errorf("%w: the result of %q is stored by reference and could not be fetched: %w", ErrUnavailable, r.CallID, err)
	}
	return out, nil
}

func decodeResult(callID string, data []byte) (windlass.ToolResult, error) {
	var r windlass.ToolResult
	if err := wirejson.Decode(data, &r); err != nil {
		return windlass.ToolResult{}, fmt.Errorf("dispatcher: decode result of %q: %w", callID, err)
	}
	if r.IsError && r.Error == nil { // a foreign worker may leave the error object out
		r.Error = &windlass.CallError{Code: windlass.CodeToolError, Message: r.Content}
	}
	return r, nil
}

// Wait returns a call's result once there is one, on any dispatcher
// instance, bounded by ctx (or Config.MaxWait when ctx has no deadline).
func (d *Dispatcher) Wait(ctx context.Context, callID string) (windlass.ToolResult, error) {
	if err := windlass.ValidateCallID(callID); err != nil {
		return windlass.ToolResult{}, fmt.Errorf("dispatcher: wait: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.cfg.MaxWait)
		defer cancel()
	}
	// Subscribe, then look in the stream, and look again now and then: the
	// server delivers a result to live subscribers before the stream has
	// stored it, so a result published just as the subscription starts can
	// miss the one and not yet be in the other. This is the one per-call
	// subscription, used only to wait for a call submitted elsewhere.
	live := make(chan *nats.Msg, 1)
	sub, err := d.cfg.Conn.ChanSubscribe(layout.ResultByCall(callID), live)
	if err != nil {
		return windlass.ToolResult{}, fmt.Errorf("dispatcher: wait for %q: %w", callID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// A call submitted on this instance is answered on its results
	// subscription too (where permissions may deny the per-call one). A
	// waiter is not a Call: a Call of this id made here meanwhile is
	// published, not taken for in flight (see call).
	own := make(chan windlass.ToolResult, 1)
	if _, loaded := d.waiters.LoadOrStore(callID, own); loaded {
		own = nil // another Wait here has it; the stream and the subscription serve this one
	} else {
		defer d.waiters.CompareAndDelete(callID, own)
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	for interval := 50 * time.Millisecond; ; interval = min(2*interval, 2*time.Second) {
		select {
		case r := <-own:
			return d.resolve(ctx, r)
		case m := <-live:
			// Prefer a stored earlier answer, should this be a second one.
			if r, err := d.Result(ctx, callID); err == nil {
				return r, nil
			}
			r, err := decodeResult(callID, m.Data)
			if err != nil {
				return r, err
			}
			return d.resolve(ctx, r)
		case <-poll.C:
			r, err := d.Result(ctx, callID)
			switch {
			case err == nil:
				return r, nil
			case !errors.Is(err, ErrNoResult) && ctx.Err() == nil:
				// A transient failure (a stream leader election, a
				// reconnect): keep waiting until ctx says stop.
				d.cfg.Logger.DebugContext(ctx, "dispatcher: wait: fetching the result failed; retrying", "call_id", callID, "error", err)
			}
			poll.Reset(interval)
		case <-ctx.Done():
			return windlass.ToolResult{}, fmt.Errorf("dispatcher: wait for %q: %w", callID, context.Cause(ctx))
		}
	}
}
