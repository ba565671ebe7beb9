package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
)

// Errors of [Service.Approve] and [Service.Reject]; the HTTP API maps each
// to a status code.
var (
	// ErrNotFound: no held call has that id (404).
	ErrNotFound = errNotFound
	// ErrArgsMismatch: the approval quotes another arguments hash than the
	// call's: the reviewer saw other arguments (412).
	ErrArgsMismatch = errors.New("approval: the arguments hash does not match the held call's arguments")
	// ErrSelfApproval: the requester may not approve their own call (403).
	ErrSelfApproval = errors.New("approval: the requester of the call may not approve it")
	// ErrAlreadyApproved: this reviewer already approved; another must (409).
	ErrAlreadyApproved = errors.New("approval: this reviewer already approved the call; it needs another reviewer")
	// ErrNoReviewer: a decision without a reviewer identity (401).
	ErrNoReviewer = errors.New("approval: a decision needs a reviewer")
	// ErrReasonTooLong: a rejection's reason over MaxReason bytes (400).
	ErrReasonTooLong = fmt.Errorf("approval: reason: at most %d bytes", MaxReason)
	// ErrNotAllowed: the reviewer is in none of the groups that may
	// decide the call's tool (ToolPolicy.ReviewerGroups) (403).
	ErrNotAllowed = errors.New("approval: this reviewer is in none of the reviewer groups that may see and decide this call")
)

// MaxReason bounds a rejection's reason, which the caller's result quotes.
const MaxReason = 4096

// TooLargeError reports edited arguments that would make the call too
// large to release (413): the call, with its release, over the NATS
// server's max payload.
type TooLargeError struct {
	// Size is the released call's size, in bytes, with the edited
	// arguments and the room for the release.
	Size int
	// Limit is the server's max payload.
	Limit int64
}

// Error implements error.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("approval: arguments: with the edited arguments the released call would be %d bytes, over the NATS server's max payload of %d bytes", e.Size, e.Limit)
}

// DecidedError reports a decision on a call already decided (409). Call is
// the call with its first decision.
type DecidedError struct {
	// Call is the held call as the first decision left it.
	Call *HeldCall
}

// Error implements error.
func (e *DecidedError) Error() string {
	who := strings.Join(e.Call.Approvers, ", ")
	switch e.Call.Status {
	case StatusRejected:
		who = e.Call.RejectedBy
	case StatusCanceled:
		return fmt.Sprintf("approval: call %q was already canceled by its caller", e.Call.ID)
	}
	return fmt.Sprintf("approval: call %q was already %s (by %s)", e.Call.ID, e.Call.Status, who)
}

// InvalidArgumentsError reports edited arguments that do not fit the tool's
// schema (422).
type InvalidArgumentsError struct {
	// Err is the validation error (a *windlass.ArgumentError).
	Err error
}

// Error implements error.
func (e *InvalidArgumentsError) Error() string { return "approval: edited arguments: " + e.Err.Error() }

// Unwrap returns the validation error (a *windlass.ArgumentError).
func (e *InvalidArgumentsError) Unwrap() error { return e.Err }

// Get returns one held call, whatever its reviewer groups ([Service.GetAs]
// checks a reviewer's).
func (s *Service) Get(ctx context.Context, id string) (*HeldCall, error) {
	return s.store.get(ctx, id)
}

// Filter selects held calls for [Service.List].
type Filter struct {
	// Status to list; default pending.
	Status Status
	// Tool keeps only this tool's calls when set.
	Tool string
	// Reviewer, when set, keeps only the calls this reviewer may see and
	// decide (see ToolPolicy.ReviewerGroups).
	Reviewer string
	// Offset and Limit page the result (newest first); Limit defaults to 50.
	Offset, Limit int
}

// List returns held calls, newest first, and the offset of the next page
// (0 when there is none).
func (s *Service) List(ctx context.Context, f Filter) ([]*HeldCall, int, error) {
	if f.Status == "" {
		f.Status = StatusPending
	}
	if !f.Status.valid() {
		return nil, 0, fmt.Errorf("approval: status %q: use pending, approved, rejected, expired or canceled", f.Status)
	}
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 50
	}
	var out []*HeldCall
	offset := int64(f.Offset)
	for len(out) < f.Limit {
		page, err := s.store.list(ctx, f.Status, offset, int64(f.Limit))
		if err != nil {
			return nil, 0, err
		}
		for i, h := range page {
			if (f.Tool == "" || h.Tool == f.Tool) && (f.Reviewer == "" || s.auth.mayDecide(f.Reviewer, h.ReviewerGroups)) {
				out = append(out, h)
				if len(out) == f.Limit {
					return out, int(offset) + i + 1, nil
				}
			}
		}
		if len(page) < f.Limit {
			return out, 0, nil
		}
		offset += int64(len(page))
	}
	return out, int(offset), nil
}

// AuditFilter selects audit entries for [Service.Audit].
type AuditFilter struct {
	// Since starts at the first entry written at or after it; zero: at
	// the oldest entry kept (see Config.Retention).
	Since time.Time
	// After starts after the entry with this id (the last one of the
	// previous page); it overrides Since.
	After string
	// Limit bounds the entries returned; default 1000, at most 10,000.
	Limit int
}

// Audit returns audit entries in the order they were written, as f
// selects. To export the log page by page, pass the last entry's ID as the
// next page's After until a page comes back shorter than Limit.
func (s *Service) Audit(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	events, err := s.store.audit(ctx, f.Since, f.After, int64(f.limit()))
	return linkReceipts(events), err // released entries link to the call's receipt (see receipt.go)
}

// limit is f.Limit with its default and bound applied.
func (f AuditFilter) limit() int {
	if f.Limit <= 0 {
		return defaultAuditPage
	}
	return min(f.Limit, maxAuditPage)
}

// The pages of [Service.Audit].
const (
	defaultAuditPage = 1000
	maxAuditPage     = 10000
)

// Approve records reviewer's approval of call id. argsHash must be the
// call's current ArgsHash (what the reviewer saw). edited, when not empty,
// replaces the arguments: it is validated against the tool's schema and
// restarts the approvals, and the audit log keeps both versions. Once the
// required number of distinct reviewers approved, the call is released to
// its tool. The returned call shows the state after the decision.
func (s *Service) Approve(ctx context.Context, id, reviewer, argsHash string, edited json.RawMessage) (*HeldCall, error) {
	if reviewer == "" {
		return nil, ErrNoReviewer
	}
	h, err := s.allowed(ctx, id, reviewer)
	if err != nil {
		return nil, err
	}
	d := decision{approve: true, reviewer: reviewer, seenHash: argsHash}
	if len(edited) > 0 {
		if err := s.validateEdit(ctx, h.Tool, edited); err != nil {
			return nil, err
		}
		canon, err := release.Canonical(edited)
		if err != nil {
			return nil, &InvalidArgumentsError{Err: err}
		}
		if err := s.fits(h, canon); err != nil {
			return nil, err
		}
		d.editedArgs, d.original = canon, h.Arguments
		d.editedHash, _ = release.ArgumentsHash(canon)
	}
	return s.decide(ctx, id, d)
}

// RejectOption is an option of [Service.Reject].
type RejectOption func(*decision)

// NoRetry rejects "do not retry": the caller's result tells the model not
// to make the call again, with these or other arguments (see
// [RejectedMessage]); the held call shows NoRetry.
func NoRetry() RejectOption { return func(d *decision) { d.noRetry = true } }

// Reject records reviewer's rejection of call id with a reason; the caller
// receives a rejected result ([RejectedMessage]) naming the reviewer and
// the reason, and saying whether the model may try again with changes or
// (with [NoRetry]) must not.
func (s *Service) Reject(ctx context.Context, id, reviewer, reason string, opts ...RejectOption) (*HeldCall, error) {
	if reviewer == "" {
		return nil, ErrNoReviewer
	}
	if len(reason) > MaxReason {
		return nil, ErrReasonTooLong
	}
	if _, err := s.allowed(ctx, id, reviewer); err != nil {
		return nil, err
	}
	d := decision{reviewer: reviewer, reason: reason}
	for _, o := range opts {
		o(&d)
	}
	return s.decide(ctx, id, d)
}

// allowed returns the held call id if reviewer may see and decide it, else
// ErrNotAllowed (before anything of the call is shown, a 409's first
// decision included). A call's groups never change once it is held, so
// the check needs no part in the decision's script.
func (s *Service) allowed(ctx context.Context, id, reviewer string) (*HeldCall, error) {
	h, err := s.store.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !s.auth.mayDecide(reviewer, h.ReviewerGroups) {
		return nil, ErrNotAllowed
	}
	return h, nil
}

// GetAs returns one held call if reviewer may see it (ErrNotAllowed if the
// call's tool is for other reviewer groups).
func (s *Service) GetAs(ctx context.Context, id, reviewer string) (*HeldCall, error) {
	return s.allowed(ctx, id, reviewer)
}

// fits checks that the held call with args can still be released: its
// message, with the room for its release, within the server's max payload.
func (s *Service) fits(h *HeldCall, args json.RawMessage) error {
	call, err := h.toolCall()
	if err != nil {
		return err
	}
	call.Arguments, call.ArgumentsRef = args, nil // an edit travels inline
	data, err := marshalCall(call)
	if err != nil {
		return err
	}
	if limit, size := s.cfg.Conn.MaxPayload(), len(data)+release.Reserve; limit > 0 && int64(size) > limit {
		return &TooLargeError{Size: size, Limit: limit}
	}
	return nil
}

func (s *Service) validateEdit(ctx context.Context, tool string, edited json.RawMessage) error {
	info, err := s.cfg.Registry.Lookup(ctx, tool)
	if err != nil {
		return fmt.Errorf("approval: the schema of %q to check the edited arguments against: %w", tool, err)
	}
	schema, err := windlass.CompileArguments(info.Spec)
	if err != nil {
		return err
	}
	if err := schema.Validate(edited); err != nil {
		return &InvalidArgumentsError{Err: err}
	}
	return nil
}

func (s *Service) decide(ctx context.Context, id string, d decision) (*HeldCall, error) {
	// The decision's event goes to the queues: their groups first.
	if err := s.ensureGroups(ctx); err != nil {
		return nil, err
	}
	// A cancellation recorded before this decision wins, even when the
	// follower of the cancels stream has not applied it yet.
	s.cancelIfRecorded(ctx, id)
	verdict, err := s.store.decide(ctx, id, d, time.Now())
	if err != nil {
		return nil, err
	}
	switch verdict[0] {
	case "missing":
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	case "hash_mismatch":
		return nil, ErrArgsMismatch
	case "self":
		return nil, ErrSelfApproval
	case "already":
		return nil, ErrAlreadyApproved
	case "lapsed":
		ids, err := s.store.expireDue(ctx, time.Now())
		s.answerExpired(ctx, ids)
		if err != nil {
			return nil, err
		}
		fallthrough
	case "decided":
		h, err := s.store.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if d.approve && h.Status == StatusApproved && !h.Released && h.Undeliverable == "" {
			_ = s.release(ctx, h) // it says what came of it in h; a failure is tried again by the sweep
		}
		return nil, &DecidedError{Call: h}
	}
	h, err := s.store.get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch verdict[0] {
	case "rejected":
		s.ended(ctx, h, StatusRejected)
		s.answerDecision(ctx, h, answerRetry)
	case "approved":
		s.ended(ctx, h, StatusApproved)
		if err := s.release(ctx, h); err != nil {
			// Approved and recorded: Run's next start, or the next
			// decision attempt's 409, finds it unreleased and resumes.
			s.cfg.Logger.ErrorContext(ctx, "approval: release failed; it will be retried", "call_id", id, "error", err)
			return h, err
		}
	}
	return h, nil
}
