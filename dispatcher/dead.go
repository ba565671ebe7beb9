package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
)

// MetadataReplayOf is the metadata key a replayed call carries: the id of
// the dead call it replays.
const MetadataReplayOf = "windlass.replay_of"

// ErrNoDeadCall is returned by [Dispatcher.Replay] for a sequence that
// holds no dead call (replayed already, or past its retention).
var ErrNoDeadCall = errors.New("dispatcher: no such dead call")

// ErrAnsweredSince is returned by [Dispatcher.Replay] for a dead record
// whose call has a successful answer: the worker that recorded it could
// not store its error answer, the call was delivered again and succeeded,
// so it is not dead, and a replay would only run it again. Replay deletes
// such a record.
var ErrAnsweredSince = errors.New("dispatcher: the dead call was answered successfully since")

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
	return readRecords(ctx, d.dead, filter, limit, d.cfg.Logger, func(dc *windlass.DeadCall, seq uint64) { dc.Seq = seq })
}

// readRecords reads up to limit records of type T on filter from stream s,
// oldest first, skipping (and logging) those that do not decode; set, when
// not nil, gives each its stream sequence.
func readRecords[T any](ctx context.Context, s jetstream.Stream, filter string, limit int, log *slog.Logger, set func(*T, uint64)) ([]T, error) {
	var out []T
	for seq := uint64(1); len(out) < limit; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("dispatcher: read %s: %w", filter, err)
		}
		seq = m.Sequence + 1
		var rec T
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			log.WarnContext(ctx, "dispatcher: unreadable record skipped", "subject", m.Subject, "seq", m.Sequence, "error", err)
			continue
		}
		if set != nil {
			set(&rec, m.Sequence)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Replay sends the dead call recorded at seq back to its tool as a new call,
// with the same arguments (read from the payloads bucket when the record
// keeps them by reference) and metadata (plus any [WithMetadata] in opts)
// and [MetadataReplayOf], counted for the same key (unless [WithKey] says
// another), a new id (unless [WithCallID] gives one) and a new deadline
// (from opts, else the usual default). It is checked against
// the tool's current spec like any call. Once the new call is accepted the
// dead record is deleted, so a call is replayed once. The new id is derived
// from the dead record (see replayID), so replays of one record made at
// once — an operator's command run again because it seemed to hang, two
// operators — are one call: each returns its id, and it runs once. It
// returns the new call's id; also with an [ErrUnavailable] error when the
// new call's publish was not confirmed: it may be queued, and the dead
// record is kept (ask for the new id's status before replaying again).
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
	if err := d.stillDead(ctx, seq, dc); err != nil {
		return "", err
	}
	if dc.ArgumentsOmitted {
		return "", fmt.Errorf("dispatcher: replay %d: the record of %q holds no arguments (they were too large to keep), so it cannot be replayed; submit the call again", seq, dc.Call.ID)
	}
	args, err := d.deadArguments(ctx, seq, dc)
	if err != nil {
		return "", err
	}
	// The dead call's metadata, then the caller's (a WithMetadata among
	// opts adds to it rather than replacing it), and always the mark of
	// the replay.
	opts = append(slices.Clip(opts), func(o *callOptions) {
		if o.id == "" {
			o.id = replayID(dc, seq)
		}
		meta := maps.Clone(dc.Call.Metadata)
		if meta == nil {
			meta = map[string]string{}
		}
		maps.Copy(meta, o.metadata)
		meta[MetadataReplayOf] = dc.Call.ID
		o.metadata = meta
		if o.key == "" {
			o.key = dc.Call.Key // counted for its caller, as the call was
		}
	})
	id, err := d.Submit(ctx, dc.Call.Name, args, opts...)
	if err != nil {
		// With an id: unconfirmed, the new call may be queued; the dead
		// record is kept, and its id says whether the replay took.
		return id, fmt.Errorf("dispatcher: replay %q: %w", dc.Call.ID, err)
	}
	if err := d.dead.DeleteMsg(ctx, seq); err != nil && !d.deadGone(ctx, seq) {
		return id, fmt.Errorf("dispatcher: replayed %q as %q, but deleting its dead record failed: %w", dc.Call.ID, id, err)
	}
	return id, nil
}

// deadArguments returns the arguments dead record dc at seq replays
// with: its own, or those it points at by reference (the record keeps the
// reference, and the bucket the object, as long as results), read and
// checked against the reference as a worker reads them.
func (d *Dispatcher) deadArguments(ctx context.Context, seq uint64, dc windlass.DeadCall) (json.RawMessage, error) {
	ref := dc.Call.ArgumentsRef
	if ref == nil {
		return dc.Call.Arguments, nil
	}
	data, err := d.payloads.Get(ctx, *ref, d.cfg.PayloadLimit)
	var tooLarge *payload.TooLargeError
	switch {
	case errors.Is(err, payload.ErrUnreadable) || errors.As(err, &tooLarge):
		return nil, fmt.Errorf("dispatcher: replay %d: the arguments of %q, stored by reference, cannot be used: %w; submit the call again", seq, dc.Call.ID, err)
	case err != nil:
		return nil, fmt.Errorf("%w: replay %d: the arguments of %q, stored by reference, could not be read: %w", ErrUnavailable, seq, dc.Call.ID, err)
	}
	return data, nil
}

// stillDead checks, before a replay, that dead record dc at seq is of a
// call that has no successful answer. A worker records a dead call before
// it stores the call's error answer; when that store fails the call is
// delivered again, and may succeed: its record then stands for a call
// that is not dead, and a replay would run it a second time. Such a record
// is deleted and the replay refused (ErrAnsweredSince); one whose call is
// still in the work queue (that redelivery has not come yet), or whose
// state cannot be read now, is refused too (ErrUnavailable).
func (d *Dispatcher) stillDead(ctx context.Context, seq uint64, dc windlass.DeadCall) error {
	// A record whose call is still in the work queue was made by a worker
	// that could not store the call's answer: the call is delivered again
	// (its deliveries not spent), and a replay now would run beside it.
	switch _, queued, err := d.callMessage(ctx, dc.Call.ID); {
	case err != nil:
		return fmt.Errorf("%w: replay %d: whether %q is still queued could not be read: %w", ErrUnavailable, seq, dc.Call.ID, err)
	case queued:
		return fmt.Errorf("%w: replay %d: %q is still in the work queue (its worker could not store its answer, and it is delivered again); replay it once it has its answer, if it is still dead", ErrUnavailable, seq, dc.Call.ID)
	}
	r, _, err := d.storedResult(ctx, dc.Call.ID)
	switch {
	case errors.Is(err, ErrNoResult):
		return nil
	case err != nil:
		return fmt.Errorf("%w: replay %d: the answer of %q could not be read to tell whether it succeeded since: %w", ErrUnavailable, seq, dc.Call.ID, err)
	case r.IsError:
		return nil // its death's answer, or another error: dead
	}
	if err := d.dead.DeleteMsg(ctx, seq); err != nil && !d.deadGone(ctx, seq) {
		return fmt.Errorf("%w: %q (worker %s, attempt %d); deleting its dead record %d failed: %w", ErrAnsweredSince, dc.Call.ID, r.Worker, r.Attempt, seq, err)
	}
	return fmt.Errorf("%w: %q (worker %s, attempt %d); its dead record %d is deleted, not replayed", ErrAnsweredSince, dc.Call.ID, r.Worker, r.Attempt, seq)
}

// deadGone reports whether the dead record at seq is certainly gone, after
// its deletion failed: another replay of it deleted it first. (nats.go
// gives the server's "no message found" of a deletion as text only.)
func (d *Dispatcher) deadGone(ctx context.Context, seq uint64) bool {
	_, err := d.dead.GetMsg(ctx, seq)
	return errors.Is(err, jetstream.ErrMsgNotFound)
}

// replayID is the id of the replay of dead record dc at seq: the same for
// every replay of that record, and another for any other record (the same
// call dead again is another death, at another time).
func replayID(dc windlass.DeadCall, seq uint64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", dc.Call.ID, seq, dc.DiedAt.UnixNano()))
	return "replay_" + hex.EncodeToString(sum[:13])
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
	return readRecords[windlass.Refusal](ctx, d.refusals, filter, limit, d.cfg.Logger, nil)
}
