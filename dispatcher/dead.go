package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
)

// MetadataReplayOf is the metadata key a replayed call carries: the id of
// the dead call it replays.
const MetadataReplayOf = "windlass.replay_of"

// ErrNoDeadCall is returned by [Dispatcher.Replay] for a sequence that
// holds no dead call (replayed already, or past its retention).
var ErrNoDeadCall = errors.New("dispatcher: no such dead call")

// DeadCalls lists the calls the fleet gave up on — their deliveries or
// retries ran out — oldest first, with the answer their callers got. tool
// filters by tool ("" lists all); at most limit are returned (0: 100).
func (d *Dispatcher) DeadCalls(ctx context.Context, tool string, limit int) ([]windlass.DeadCall, error) {
	filter := layout.DeadSubjects
	if tool != "" {
		if err := windlass.ValidateName(tool); err != nil {
			return nil, fmt.Errorf("dispatcher: dead calls: tool: %w", err)
		}
		filter = layout.DeadSubject(tool)
	}
	if limit <= 0 {
		limit = 100
	}
	var out []windlass.DeadCall
	for seq := uint64(1); len(out) < limit; {
		m, err := d.dead.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("dispatcher: dead calls: %w", err)
		}
		seq = m.Sequence + 1
		var dc windlass.DeadCall
		if err := json.Unmarshal(m.Data, &dc); err != nil {
			d.cfg.Logger.Warn("dispatcher: unreadable dead call record skipped", "seq", m.Sequence, "error", err)
			continue
		}
		dc.Seq = m.Sequence
		out = append(out, dc)
	}
	return out, nil
}

// Replay sends the dead call recorded at seq back to its tool as a new call,
// with the same arguments and metadata (plus any [WithMetadata] in opts)
// and [MetadataReplayOf], a new id (unless [WithCallID] gives one) and a
// new deadline (from opts, else the usual default). It is checked against
// the tool's current spec like any call. Once the new call is accepted the
// dead record is deleted, so a call is replayed once. It returns the new
// call's id.
func (d *Dispatcher) Replay(ctx context.Context, seq uint64, opts ...CallOption) (string, error) {
	m, err := d.dead.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", fmt.Errorf("%w: sequence %d", ErrNoDeadCall, seq)
	}
	if err != nil {
		return "", fmt.Errorf("dispatcher: replay %d: %w", seq, err)
	}
	var dc windlass.DeadCall
	if err := json.Unmarshal(m.Data, &dc); err != nil {
		return "", fmt.Errorf("dispatcher: replay %d: decode the dead call: %w", seq, err)
	}
	if dc.ArgumentsOmitted {
		return "", fmt.Errorf("dispatcher: replay %d: the record of %q holds no arguments (they were too large to keep), so it cannot be replayed; submit the call again", seq, dc.Call.ID)
	}
	// The dead call's metadata, then the caller's (a WithMetadata among
	// opts adds to it rather than replacing it), and always the mark of
	// the replay.
	opts = append(slices.Clip(opts), func(o *callOptions) {
		meta := maps.Clone(dc.Call.Metadata)
		if meta == nil {
			meta = map[string]string{}
		}
		maps.Copy(meta, o.metadata)
		meta[MetadataReplayOf] = dc.Call.ID
		o.metadata = meta
	})
	id, err := d.Submit(ctx, dc.Call.Name, dc.Call.Arguments, opts...)
	if err != nil {
		return "", fmt.Errorf("dispatcher: replay %q: %w", dc.Call.ID, err)
	}
	if err := d.dead.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return id, fmt.Errorf("dispatcher: replayed %q as %q, but deleting its dead record failed: %w", dc.Call.ID, id, err)
	}
	return id, nil
}

// Refusals lists the messages workers dropped from tools' call subjects
// without running or answering them — calls of gated tools without a
// valid release: forged, copied, replayed — oldest first (PROTOCOL.md,
// "Refusals"). tool filters by tool ("" lists all); at most limit are
// returned (0: 100). The stream keeps layout.MaxRefusals records for as
// long as dead calls.
func (d *Dispatcher) Refusals(ctx context.Context, tool string, limit int) ([]windlass.Refusal, error) {
	filter := layout.RefusalSubjects
	if tool != "" {
		if err := windlass.ValidateName(tool); err != nil {
			return nil, fmt.Errorf("dispatcher: refusals: tool: %w", err)
		}
		filter = layout.RefusalSubject(tool)
	}
	if limit <= 0 {
		limit = 100
	}
	var out []windlass.Refusal
	for seq := uint64(1); len(out) < limit; {
		m, err := d.refusals.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("dispatcher: refusals: %w", err)
		}
		seq = m.Sequence + 1
		var r windlass.Refusal
		if err := json.Unmarshal(m.Data, &r); err != nil {
			d.cfg.Logger.Warn("dispatcher: unreadable refusal record skipped", "seq", m.Sequence, "error", err)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
