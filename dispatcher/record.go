package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/streamread"
)

// callRecord is what the fleet stores of an accepted call, wherever it is
// read from: the call's own message in the calls stream while it is queued
// or running, the headers of its result once it has one, or (for a gated
// call, whose message goes to the approval service first) its queued
// event. See PROTOCOL.md, "Call records".
type callRecord struct {
	tool     string
	queuedAt time.Time // when the fleet stored the call
	deadline time.Time
	origin   string // where its result goes
	argsHash string // the arguments' canonical hash
	key      string // the key it is counted for ("" for the default)
}

// recordFromCall reads the record of a call message.
func recordFromCall(callID string, m *jetstream.RawStreamMsg) (callRecord, bool) {
	var c struct {
		ID       string    `json:"id"`
		Name     string    `json:"name"`
		Deadline time.Time `json:"deadline"`
		Key      string    `json:"key"`
	}
	if json.Unmarshal(m.Data, &c) != nil || c.ID != callID {
		return callRecord{}, false // another call's (a token collision) or foreign
	}
	return callRecord{tool: c.Name, queuedAt: m.Time, deadline: c.Deadline, key: c.Key,
		origin: m.Header.Get(layout.HeaderOrigin), argsHash: m.Header.Get(layout.HeaderArgsHash)}, true
}

// recordFromResult reads the record a result message carries of its call
// (the worker copies it from the call message).
func recordFromResult(r windlass.ToolResult, h nats.Header) callRecord {
	rec := callRecord{tool: r.Name, argsHash: h.Get(layout.HeaderArgsHash), key: h.Get(layout.HeaderKey)}
	rec.queuedAt, _ = time.Parse(time.RFC3339Nano, h.Get(layout.HeaderQueuedAt))
	rec.deadline, _ = time.Parse(time.RFC3339Nano, h.Get(layout.HeaderDeadline))
	return rec
}

// recordFromEvent reads the record of a queued event.
func recordFromEvent(e windlass.Event) callRecord {
	return callRecord{tool: e.Tool, queuedAt: e.Time, deadline: e.Deadline, origin: e.Origin, argsHash: e.ArgsHash, key: e.Key}
}

// known is what the fleet knows of a call: its record, and its result once
// it has one. found is false when no source knows the call.
type known struct {
	rec    callRecord
	result *windlass.ToolResult
	found  bool
}

// find reads what the fleet knows of a call, in the order that misses
// nothing: the call message first (it exists while the call is queued or
// running), then the result (stored before the call message is deleted),
// then the queued event (a gated call held by the approval service, or a
// call a protocol 1 dispatcher queued). An answer of "none" from any source
// comes from its stream's leader; a source that cannot be read is an error,
// never "none".
func (d *Dispatcher) find(ctx context.Context, callID string) (known, error) {
	var k known
	var err error
	if k.rec, k.found, err = d.callMessage(ctx, callID); err != nil {
		return k, err
	}
	r, h, err := d.storedResult(ctx, callID)
	switch {
	case err == nil:
		k.result = &r
		if !k.found {
			k.rec, k.found = recordFromResult(r, h), true
		}
	case !errors.Is(err, ErrNoResult):
		return k, err
	}
	if k.found && k.rec.argsHash != "" {
		return k, nil // a caller's own id, recorded with its call
	}
	// A gated call's queued event is its first record: once released, its
	// message and result hold what the approval service approved, not
	// what the caller submitted (the arguments' hash, the queued time).
	q, ok, err := d.lastEvent(ctx, callID, windlass.EventQueued)
	if err != nil {
		return k, err
	}
	if ok {
		k.rec, k.found = recordFromEvent(q), true
	}
	return k, nil
}

// callMessage reads the record of a call's message in the calls stream.
// Another message on the call's subject (a forgery, or another id with
// the same token) is skipped, up to maxForeign of them; past that, the
// call's state cannot be established.
func (d *Dispatcher) callMessage(ctx context.Context, callID string) (callRecord, bool, error) {
	subject := layout.CallByID(callID)
	from := uint64(1)
	for range maxForeign + 1 {
		m, err := streamread.NextMsg(ctx, d.cfg.Conn, d.calls, subject, from)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return callRecord{}, false, nil
		case err != nil:
			return callRecord{}, false, fmt.Errorf("dispatcher: read the call message of %q: %w", callID, err)
		}
		if rec, ok := recordFromCall(callID, m); ok {
			return rec, true, nil
		}
		from = m.Sequence + 1
	}
	return callRecord{}, false, fmt.Errorf("dispatcher: read the call message of %q: more than %d other messages on its subject", callID, maxForeign)
}

// maxForeign bounds the other messages callMessage skips on a call's
// subject.
const maxForeign = 4

// storedResult reads a call's first result and its message's headers:
// ErrNoResult when the results stream's leader says there is none.
func (d *Dispatcher) storedResult(ctx context.Context, callID string) (windlass.ToolResult, nats.Header, error) {
	m, err := streamread.FirstMsg(ctx, d.cfg.Conn, d.results, layout.ResultByCall(callID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return windlass.ToolResult{}, nil, fmt.Errorf("%w: %q", ErrNoResult, callID)
	}
	if err != nil {
		return windlass.ToolResult{}, nil, fmt.Errorf("dispatcher: fetch result of %q: %w", callID, err)
	}
	r, err := decodeResult(callID, m.Data)
	return r, m.Header, err
}

// recordOf reads the record of a call id that was used before, for the
// own-id check (see conflict). A read that fails (a reconnect, a leader
// election) is made again, with backoff, for up to queuedGrace; so is one
// that finds none when due is true: the calls stream said another submit
// of the id was stored, and a gated call's queued event follows its
// publish. false when there is no record, or none could be read in time:
// then the calls stream's duplicate window is what remains to catch a
// resubmit.
func (d *Dispatcher) recordOf(ctx context.Context, callID string, due bool) (callRecord, bool) {
	k, err := retry.Value(ctx, recordReadPolicy, func(ctx context.Context) (known, error) {
		k, err := d.find(ctx, callID)
		switch {
		case err != nil:
			return k, err
		case !k.found && due:
			return k, errNotYet
		}
		return k, nil
	})
	if err != nil && !errors.Is(err, errNotYet) && ctx.Err() == nil {
		d.cfg.Logger.WarnContext(ctx, "dispatcher: could not check whether the call id was used before; relying on the duplicate window", "call_id", callID, "error", err)
	}
	return k.rec, err == nil && k.found
}

// recordReadPolicy is how a look-up of a call's record asks again when the
// streams cannot be read: briefly, for up to queuedGrace.
var recordReadPolicy = retry.Policy{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, For: queuedGrace}

// errNotYet is recordOf's "no record yet; look again".
var errNotYet = errors.New("dispatcher: no record of the call yet")
