package windlass

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/windlass-dev/windlass/internal/argcheck"
	"github.com/windlass-dev/windlass/internal/gatecond"
)

// ConditionError refuses a spec whose ApprovalCondition is not a valid
// condition: where it is wrong (1-based line and column; 0 when the
// problem has no position) and why. It unwraps to [ErrInvalidSpec].
type ConditionError struct {
	// Tool is the spec's name.
	Tool string
	// Line and Column locate the problem in the expression.
	Line, Column int
	// Reason says what is wrong.
	Reason string
}

// Error implements error.
func (e *ConditionError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%v: tool %q: approval_condition: %s", ErrInvalidSpec, e.Tool, e.Reason)
	}
	return fmt.Sprintf("%v: tool %q: approval_condition: %d:%d: %s", ErrInvalidSpec, e.Tool, e.Line, e.Column, e.Reason)
}

// Unwrap returns [ErrInvalidSpec].
func (e *ConditionError) Unwrap() error { return ErrInvalidSpec }

// validateCondition checks ApprovalCondition: that it compiles, and that
// it is not set together with RequiresApproval.
func (s Spec) validateCondition() error {
	if s.ApprovalCondition == "" {
		return nil
	}
	if s.RequiresApproval {
		return fmt.Errorf("%w: tool %q: requires_approval and approval_condition are exclusive: requires_approval gates every call, approval_condition the calls it holds for; set one", ErrInvalidSpec, s.Name)
	}
	if _, err := gatecond.Cached(s.ApprovalCondition); err != nil {
		var ce *gatecond.Error
		if errors.As(err, &ce) {
			return &ConditionError{Tool: s.Name, Line: ce.Line, Column: ce.Column, Reason: ce.Reason}
		}
		return fmt.Errorf("%w: tool %q: approval_condition: %w", ErrInvalidSpec, s.Name, err)
	}
	return nil
}

// Gated reports whether some calls of the tool may need a human's
// approval: every call under RequiresApproval, some under an
// ApprovalCondition. The tool's call subject then carries the approval
// service's releases, and its worker checks them.
func (s Spec) Gated() bool { return s.RequiresApproval || s.ApprovalCondition != "" }

// NeedsApproval reports whether a call of the tool with these arguments
// (JSON) must be approved before it runs: every call under
// RequiresApproval; under an ApprovalCondition, a call for which it is
// true. When the condition cannot be evaluated on the arguments (an
// invalid condition, arguments that are not an object, a missing field,
// the cost limit) it returns true with the error: fail closed.
func (s Spec) NeedsApproval(args json.RawMessage) (bool, error) {
	switch {
	case s.RequiresApproval:
		return true, nil
	case s.ApprovalCondition == "":
		return false, nil
	}
	c, err := gatecond.Cached(s.ApprovalCondition)
	if err != nil {
		return true, fmt.Errorf("tool %q: approval_condition: %w", s.Name, err)
	}
	// The condition decodes the arguments: not more of them than their
	// validation would (it may come first).
	if _, over := argcheck.Values(args, s.argumentValues()); over {
		return true, fmt.Errorf("tool %q: approval_condition: not evaluated: the arguments hold more than %s JSON values, the tool's max_argument_values", s.Name, englishPrinter.Sprint(s.argumentValues()))
	}
	needs, err := c.Eval(args)
	if err != nil {
		return true, fmt.Errorf("tool %q: approval_condition: %w", s.Name, err)
	}
	return needs, nil
}
