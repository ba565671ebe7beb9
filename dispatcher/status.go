package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
)

// State is where a call stands, as [Dispatcher.Status] sees it.
type State string

// The states a status query can report.
const (
	// StateQueued: accepted, waiting for a worker.
	StateQueued State = "queued"
	// StateRunning: a worker is running an attempt.
	StateRunning State = "running"
	// StateRetrying: an attempt failed with a retryable error; the next
	// one starts after a backoff.
	StateRetrying State = "retrying"
	// StateFinished: the call has a result (success or error).
	StateFinished State = "finished"
	// StateAwaitingApproval: a gated call held for a human decision.
	StateAwaitingApproval State = "awaiting_approval"
	// StateReleased: a gated call approved and handed to its tool.
	StateReleased State = "released"
	// StateUnknown: the fleet has no record of the call: never accepted,
	// or past the retention window.
	StateUnknown State = "unknown"
)

// Approval is what the approval service reports of a held call.
type Approval struct {
	// Status is pending, approved, rejected, expired or canceled.
	Status string `json:"status"`
	// ExpiresAt is when the approval window lapses.
	ExpiresAt time.Time `json:"expires_at"`
	// Approvers are the reviewers who approved so far.
	Approvers []string `json:"approvers,omitempty"`
	// RequiredApprovals is how many must approve.
	RequiredApprovals int `json:"required_approvals"`
	// Released reports that the approved call went to its tool.
	Released bool `json:"released"`
}

// CallStatus is a call's latest known state. Its JSON (snake_case, empty
// fields left out) is what `windlass status --json` prints and the HTTP API
// answers.
type CallStatus struct {
	// ID is the call id.
	ID string `json:"id"`
	// Tool is the tool's name, once known.
	Tool string `json:"tool,omitempty"`
	// State summarises where the call is.
	State State `json:"state"`
	// Attempt is the latest attempt a worker started (0 before any).
	Attempt int `json:"attempt,omitempty"`
	// Worker runs (or ran) the latest attempt.
	Worker string `json:"worker,omitempty"`
	// Progress is the running tool's latest report, if any.
	Progress *windlass.Progress `json:"progress,omitempty"`
	// LastError is the latest retryable failure, while retrying.
	LastError *windlass.CallError `json:"last_error,omitempty"`
	// RetryAt is when the next attempt may start, while retrying.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Key is the key the call is counted for by the fleet's limits
	// (absent: the shared default).
	Key string `json:"key,omitempty"`
	// QueuedAt is when the fleet accepted the call.
	QueuedAt time.Time `json:"queued_at,omitzero"`
	// StartedAt is when the latest attempt started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Deadline is the call's deadline.
	Deadline time.Time `json:"deadline,omitzero"`
	// Result is the call's result once it is finished.
	Result *windlass.ToolResult `json:"result,omitempty"`
	// Approval is set for a gated call the approval service holds.
	Approval *Approval `json:"approval,omitempty"`
}

// ErrUnavailable is wrapped by the errors of [Dispatcher.Status] and
// [Dispatcher.Cancel] when the fleet's streams (or the approval service)
// cannot be read: the call may well exist, and asking again later may
// answer. It is never the answer for a call known not to exist, which is
// [StateUnknown] or [ErrUnknownCall]. [Dispatcher.Call] and
// [Dispatcher.Submit] return it for a call that may exist but could not be
// confirmed: a publish whose acknowledgement was lost, a deadline that
// passed with the results unreadable (or a result that could not be
// fetched).
var ErrUnavailable = errors.New("dispatcher: unavailable, try again")

// Status reports a call's latest known state, from any dispatcher
// instance: its result when it has one; else its record (the call's
// message, or a gated call's queued event), its latest events (started,
// progress, retrying) and what the approval service knows of it. A finished
// call keeps its queued time and deadline (from its result's headers).
// [StateUnknown] means every source answered and none knows the call;
// when one cannot be read (NATS down or restarting, a stream not
// recovered yet), the error wraps [ErrUnavailable].
func (d *Dispatcher) Status(ctx context.Context, callID string) (CallStatus, error) {
	st := CallStatus{ID: callID, State: StateUnknown}
	if err := windlass.ValidateCallID(callID); err != nil {
		return st, fmt.Errorf("dispatcher: status: %w", err)
	}
	unavailable := func(err error) (CallStatus, error) {
		return CallStatus{ID: callID, State: StateUnknown}, fmt.Errorf("%w: status of %q: %w", ErrUnavailable, callID, err)
	}
	k, err := d.find(ctx, callID)
	if err != nil {
		return unavailable(err)
	}
	if k.found {
		st.State, st.Tool, st.QueuedAt, st.Deadline, st.Key = StateQueued, k.rec.tool, k.rec.queuedAt, k.rec.deadline, k.rec.key
	}
	if k.result != nil {
		r, err := d.resolve(ctx, *k.result)
		if err != nil {
			return unavailable(err)
		}
		st.State, st.Result, st.Tool, st.Attempt, st.Worker, st.StartedAt = StateFinished, &r, r.Name, r.Attempt, r.Worker, r.StartedAt
		return st, nil
	}
	started, hasStarted, err := d.lastEvent(ctx, callID, windlass.EventStarted)
	if err != nil {
		return unavailable(err)
	}
	if hasStarted {
		st.State, st.Tool, st.Attempt, st.Worker, st.StartedAt = StateRunning, started.Tool, started.Attempt, started.Worker, started.Time
		p, ok, err := d.lastEvent(ctx, callID, windlass.EventProgress)
		if err != nil {
			return unavailable(err)
		}
		if ok && p.Attempt == started.Attempt {
			st.Progress = p.Progress
		}
		rt, ok, err := d.lastEvent(ctx, callID, windlass.EventRetrying)
		if err != nil {
			return unavailable(err)
		}
		if ok && rt.Attempt >= started.Attempt {
			st.State, st.LastError, st.RetryAt = StateRetrying, rt.Error, rt.RetryAt
		}
		return st, nil
	}
	approval, err := d.askApproval(ctx, callID)
	if err != nil {
		return unavailable(err)
	}
	if approval != nil {
		st.Approval = approval
		switch {
		case approval.Status == "pending":
			st.State = StateAwaitingApproval
		case approval.Status == "approved" && approval.Released:
			st.State = StateReleased
		}
	}
	return st, nil
}

// askApproval asks the approval service about a held call; nil when it
// holds none (or no approval service runs).
func (d *Dispatcher) askApproval(ctx context.Context, callID string) (*Approval, error) {
	reqCtx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	m, err := d.cfg.Conn.RequestWithContext(reqCtx, layout.ApprovalStatusSubject, []byte(callID))
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, nil // no approval service: nothing is held
	}
	if err != nil {
		return nil, fmt.Errorf("dispatcher: status of %q: ask the approval service: %w", callID, err)
	}
	var reply struct {
		Found bool     `json:"found"`
		Call  Approval `json:"call"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return nil, fmt.Errorf("dispatcher: status of %q: %w", callID, err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("dispatcher: status of %q: approval service: %s", callID, reply.Error)
	}
	if !reply.Found {
		return nil, nil
	}
	return &reply.Call, nil
}
