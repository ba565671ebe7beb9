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
)

// State is where a call stands, as [Dispatcher.Status] sees it.
type State string

// The states a status query can report.
const (
	// StateFinished: the call has a result (success or error).
	StateFinished State = "finished"
	// StateAwaitingApproval: a gated call held for a human decision.
	StateAwaitingApproval State = "awaiting_approval"
	// StateReleased: a gated call approved and handed to its tool.
	StateReleased State = "released"
	// StateUnknown: no result and no held call: queued, running, or never
	// submitted. (Progress events come with the delivery work.)
	StateUnknown State = "unknown"
)

// Approval is what the approval service reports of a held call.
type Approval struct {
	// Status is pending, approved, rejected or expired.
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

// CallStatus is a call's latest known state.
type CallStatus struct {
	// ID is the call id.
	ID string
	// State summarises where the call is.
	State State
	// Result is the call's result once it is finished.
	Result *windlass.ToolResult
	// Approval is set for a gated call the approval service holds.
	Approval *Approval
}

// Status reports a call's latest known state, from any dispatcher instance:
// its result when it has one, else what the approval service knows of it.
func (d *Dispatcher) Status(ctx context.Context, callID string) (CallStatus, error) {
	st := CallStatus{ID: callID, State: StateUnknown}
	r, err := d.Result(ctx, callID)
	switch {
	case err == nil:
		st.State, st.Result = StateFinished, &r
		return st, nil
	case !errors.Is(err, ErrNoResult):
		return st, err
	}
	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := d.cfg.Conn.RequestWithContext(reqCtx, layout.ApprovalStatusSubject, []byte(callID))
	if errors.Is(err, nats.ErrNoResponders) {
		return st, nil // no approval service: nothing is held
	}
	if err != nil {
		return st, fmt.Errorf("dispatcher: status of %q: ask the approval service: %w", callID, err)
	}
	var reply struct {
		Found bool     `json:"found"`
		Call  Approval `json:"call"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return st, fmt.Errorf("dispatcher: status of %q: %w", callID, err)
	}
	if reply.Error != "" {
		return st, fmt.Errorf("dispatcher: status of %q: approval service: %s", callID, reply.Error)
	}
	if reply.Found {
		st.Approval = &reply.Call
		switch {
		case reply.Call.Status == "pending":
			st.State = StateAwaitingApproval
		case reply.Call.Status == "approved" && reply.Call.Released:
			st.State = StateReleased
		}
	}
	return st, nil
}
