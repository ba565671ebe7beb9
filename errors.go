package windlass

import (
	"errors"
	"fmt"
	"time"
)

// ErrorCode classifies a failed call. Codes are stable strings on the wire
// (ToolResult.error.code) so callers in any language can branch on them.
type ErrorCode string

// The error codes of the protocol. PROTOCOL.md describes when each is used.
const (
	// CodeInvalidArguments: the arguments do not match the tool's schema.
	CodeInvalidArguments ErrorCode = "invalid_arguments"
	// CodeUnknownTool: no tool of that name is registered in the fleet.
	CodeUnknownTool ErrorCode = "unknown_tool"
	// CodeNoWorker: the tool is known but no live worker serves it.
	CodeNoWorker ErrorCode = "no_worker"
	// CodeTimeout: the call's deadline or the tool's timeout passed.
	CodeTimeout ErrorCode = "timeout"
	// CodeToolError: the tool ran and returned an error.
	CodeToolError ErrorCode = "tool_error"
	// CodePanic: the tool panicked; the fleet recovered.
	CodePanic ErrorCode = "panic"
	// CodeCanceled: the caller or the fleet canceled the call.
	CodeCanceled ErrorCode = "canceled"
	// CodeRejected: a reviewer rejected a gated call.
	CodeRejected ErrorCode = "rejected"
	// CodeExpired: a gated call's approval window lapsed.
	CodeExpired ErrorCode = "expired"
	// CodeWorkerLost: the call's deliveries ran out without an answer.
	CodeWorkerLost ErrorCode = "worker_lost"
	// CodeSpecMismatch: the worker's spec differs from the one the caller saw.
	CodeSpecMismatch ErrorCode = "spec_mismatch"
	// CodeInvalidCall: the call message itself is malformed (bad JSON, missing id).
	CodeInvalidCall ErrorCode = "invalid_call"
	// CodePayloadTooLarge: the encoded call exceeds the server's max payload.
	CodePayloadTooLarge ErrorCode = "payload_too_large"
	// CodeUnavailable: the fleet could not be reached (NATS down, stream
	// missing), or could not confirm what became of the call (a publish
	// unconfirmed, a remote tool's answer lost): its message says which.
	CodeUnavailable ErrorCode = "unavailable"
	// CodeResultTooLarge: the tool ran, but its encoded result exceeds what
	// the fleet can deliver (the NATS server's max payload). Permanent: the
	// call is not run again.
	CodeResultTooLarge ErrorCode = "result_too_large"
	// CodeIDConflict: the call id is already taken by a call of another
	// tool or with other arguments; that call is not this one.
	CodeIDConflict ErrorCode = "id_conflict"
	// CodePayloadUnreadable: the call's arguments or its result travel by
	// reference (see [PayloadRef]) and the object cannot be used: it is
	// gone (past its lifetime) or does not match its size and digest. Its
	// content is never used as data.
	CodePayloadUnreadable ErrorCode = "payload_unreadable"
	// CodeRateLimited: the caller's key is over its own limit for the tool
	// (its rate, or its cap of calls queued or running); the call was not
	// queued. Retryable, after the error's RetryAfter; other keys' calls
	// are not affected.
	CodeRateLimited ErrorCode = "rate_limited"
	// CodeOverloaded: the tool's queue, or the fleet's, is full; the call
	// was not queued. Retryable, after the error's RetryAfter.
	CodeOverloaded ErrorCode = "overloaded"
)

// CallError is the error object of a failed [ToolResult]: a code a program
// can branch on and a message a model can read. It is also a Go error, so a
// tool (for instance a proxy for a remote tool) can return one to choose the
// code of its result; [Invoke] then keeps the code and uses the message as
// the result's content.
type CallError struct {
	// Code classifies the failure.
	Code ErrorCode `json:"code"`
	// Message is the text for the model (the result's content).
	Message string `json:"message"`
	// Retryable reports that the failure may pass if the call is made
	// again (the tool said so with [Retryable]). A worker retries such a
	// call itself, within the tool's retry policy, before answering it.
	Retryable bool `json:"retryable,omitempty"`
	// RetryAfterMS is the delay before another attempt that the tool asked
	// for with [RetryAfter], in milliseconds.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`

	recovered *PanicError // a panic's value and stack, where it was recovered: see ToolResult.Panic
}

// RetryAfter is RetryAfterMS as a duration: how long to wait before
// calling again (zero: no advice).
func (e *CallError) RetryAfter() time.Duration {
	return time.Duration(e.RetryAfterMS) * time.Millisecond
}

// Error implements error as "code: message".
func (e *CallError) Error() string { return string(e.Code) + ": " + e.Message }

// Is reports whether target is a *CallError with the same code, so
// errors.Is(err, &windlass.CallError{Code: windlass.CodeTimeout}) works.
func (e *CallError) Is(target error) bool {
	t, ok := target.(*CallError)
	return ok && t.Code == e.Code
}

// ExecutionError is returned by [Run] when a tool fails. Unlike [Invoke],
// direct use has no model to recover, so the failure is an error.
type ExecutionError struct {
	// Tool is the name of the tool that failed.
	Tool string
	// Code classifies the failure.
	Code ErrorCode
	// Message is the text the model would have seen.
	Message string
	// Err is the tool's own error when it returned one (nil for a timeout
	// the tool did not report, or a panic).
	Err error
}

// Error implements error.
func (e *ExecutionError) Error() string {
	return fmt.Sprintf("windlass: tool %q failed (%s): %s", e.Tool, e.Code, e.Message)
}

// Unwrap returns the tool's own error.
func (e *ExecutionError) Unwrap() error { return e.Err }

// ArgumentError reports arguments that do not satisfy a tool's schema. Path
// is a JSONPath-style location inside the arguments ("$" is the whole
// object, "$.items[0].name" a nested field, `$.options["0"]` the key "0"
// of an object: a key that is not a plain name is in brackets as a JSON
// string) and Rule the JSON Schema keyword that failed ("type",
// "required", "minimum", ...).
type ArgumentError struct {
	// Tool is the tool whose schema the arguments broke.
	Tool string
	// Path locates the violation, JSONPath style ("$.items[0].name",
	// `$.options["a.b"]`).
	Path string
	// Rule is the JSON Schema keyword that failed.
	Rule string
	// Message says what is wrong, in English.
	Message string
}

// Error implements error.
func (e *ArgumentError) Error() string {
	return fmt.Sprintf("invalid arguments for tool %q: %s: %s (rule %q)", e.Tool, e.Path, e.Message, e.Rule)
}

// PanicError is the error [Invoke] builds from a recovered panic. Stack is
// for logs; the model only sees the value. The result of the call carries
// it ([ToolResult.Panic]) for its caller to log: the package logs nothing.
type PanicError struct {
	// Value is what the tool panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// ErrInvalidSpec is wrapped by every spec validation error.
var ErrInvalidSpec = errors.New("windlass: invalid tool spec")

// ErrUnknownStyle is wrapped by the error of [Spec.Schema] for a style it
// does not know.
var ErrUnknownStyle = errors.New("windlass: unknown schema style")

// RetryableError marks a tool's error as worth another attempt: a flaky
// upstream, a rate limit, a lock held elsewhere. Build one with [Retryable]
// or [RetryAfter]. A fleet worker then runs the call again, with backoff, up
// to the tool's retry limit; other errors are answered at once.
type RetryableError struct {
	// Err is the tool's error; its text is what the model sees if the
	// retries run out.
	Err error
	// After is the delay the tool asks for before the next attempt (zero:
	// the worker's backoff decides).
	After time.Duration
}

// Error implements error with the wrapped error's text.
func (e *RetryableError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *RetryableError) Unwrap() error { return e.Err }

// Retryable marks err as retryable; a nil err stays nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// RetryAfter marks err as retryable no sooner than after d; a nil err stays
// nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err, After: d}
}

// IsRetryable reports whether err, or an error it wraps, is a
// [RetryableError] or a [CallError] marked retryable, and the delay asked for.
func IsRetryable(err error) (after time.Duration, ok bool) {
	var re *RetryableError
	if errors.As(err, &re) {
		return re.After, true
	}
	var ce *CallError
	if errors.As(err, &ce) && ce.Retryable {
		return 0, true
	}
	return 0, false
}

// ErrCallCanceled is the cause of a running tool's context when the call
// was canceled through the fleet (see the dispatcher's Cancel); the cause
// may carry the canceler's reason, see [CancelCause].
var ErrCallCanceled = errors.New("windlass: the call was canceled")

// CancelCause is the error a canceled call's context ends with: it wraps
// [ErrCallCanceled] and carries reason (which may be empty).
// [ResultFromError] turns it into a canceled result that quotes the reason.
func CancelCause(reason string) error {
	if reason == "" {
		return ErrCallCanceled
	}
	return fmt.Errorf("%w: %s", ErrCallCanceled, reason)
}
