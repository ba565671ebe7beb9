package windlass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"time"
)

// errToolTimeout is the cancel cause Invoke sets when the tool's own timeout
// (or the call's deadline) passes, to tell it apart from the caller's context.
var errToolTimeout = errors.New("windlass: tool timed out")

// Invoke runs a model-issued call of tool and wraps the outcome. It never
// fails: an error, a timeout, a canceled ctx or a panic becomes a result with
// IsError set, an error code and a message the model can act on, because the
// agent must hand the failure back to the model rather than stop.
//
// The tool's context ends at the earlier of the tool's timeout (per attempt)
// and call.Deadline, and carries the [CallInfo]. A tool that ignores its
// context still fails the call on time: Invoke returns and the tool's
// goroutine is left to finish on its own. Invoke is safe for concurrent use.
func Invoke(ctx context.Context, tool Tool, call ToolCall) ToolResult {
	return invoke(ctx, tool, call, nil)
}

// invoke is Invoke, setting *own (when own is not nil) to the error the
// tool itself returned, if it did.
func invoke(ctx context.Context, tool Tool, call ToolCall, own *error) ToolResult {
	result := make(chan ToolResult, 1)
	invokeAsync(ctx, tool, call, func(r ToolResult) { result <- r }, own)
	return <-result
}

// InvokeAsync is [Invoke] without the wait: it starts the call on a
// goroutine of its own and returns, and done receives, exactly once, the
// result Invoke would return. done runs on the tool's goroutine when the
// tool returns, or on a goroutine of its own when the tool's timeout, the
// call's deadline or ctx ends first; a tool that returns later is then
// ignored. A call that cannot start (its deadline has passed, or the
// arguments do not fit the schema of a [FuncTool] or a [RawTool], which
// are checked and decoded before the tool's goroutine starts) is answered
// before InvokeAsync returns.
//
// A caller that holds many long calls at once uses it to keep one goroutine
// a call, the tool's, rather than a second one waiting for each. InvokeAsync
// is safe for concurrent use.
func InvokeAsync(ctx context.Context, tool Tool, call ToolCall, done func(ToolResult)) {
	invokeAsync(ctx, tool, call, done, nil)
}

// invokeAsync is InvokeAsync, setting *own (when own is not nil), before
// done runs, to the error the tool itself returned, if it did (not a
// panic, nor a timeout or cancellation it did not report).
func invokeAsync(ctx context.Context, tool Tool, call ToolCall, done func(ToolResult), own *error) {
	started := time.Now()
	spec := tool.Spec().WithDefaults()
	inv := &invocation{started: started, tool: spec.Name, budget: spec.Timeout, done: done}
	if call.Name == "" {
		call.Name = inv.tool
	}
	if call.Attempt == 0 {
		call.Attempt = 1
	}
	if noArguments(call.Arguments) {
		call.Arguments = json.RawMessage("{}")
	}
	inv.call = call

	if !call.Deadline.IsZero() {
		if left := time.Until(call.Deadline); left < inv.budget {
			inv.budget, inv.byDeadline = left, true
		}
	}
	if inv.budget <= 0 {
		inv.done(inv.finish(ErrorResult(call, CodeTimeout, timeoutText(inv.tool, 0, inv.byDeadline))))
		return
	}

	runCtx, cancel := context.WithTimeoutCause(ctx, inv.budget, errToolTimeout)
	inv.ctx = ContextWithCallInfo(runCtx, CallInfo{
		ID: call.ID, Name: call.Name, Attempt: call.Attempt, Deadline: call.Deadline, Metadata: call.Metadata,
	})
	inv.cancel = cancel
	run, err := bind(tool, call.Arguments)
	if err != nil {
		inv.end(nil, err)
		return
	}
	// Whichever ends first answers the call: the tool returning, or its
	// context ending. stop tells the tool's goroutine which: it answers only
	// if it kept the context's answer from running.
	stop := context.AfterFunc(inv.ctx, func() { inv.end(nil, inv.ctx.Err()) })
	go func() {
		v, err := callTool(inv.ctx, run)
		if stop() {
			var p *PanicError
			if own != nil && err != nil && !errors.As(err, &p) {
				*own = err
			}
			inv.end(v, err)
		}
	}()
}

// invocation is a call started by [InvokeAsync], waiting for its outcome.
type invocation struct {
	started    time.Time
	tool       string // the spec's name, for the texts of timeouts and cancellations
	call       ToolCall
	budget     time.Duration
	byDeadline bool
	ctx        context.Context // the tool's
	cancel     context.CancelFunc
	done       func(ToolResult)
}

// bind returns the call of tool with args. A [binder] checks and decodes
// them now, on the caller's goroutine; any other tool does in its Call.
func bind(tool Tool, args json.RawMessage) (run func(context.Context) (any, error), err error) {
	b, ok := tool.(binder)
	if !ok {
		return func(ctx context.Context) (any, error) { return tool.Call(ctx, args) }, nil
	}
	defer recoverPanic(&err)
	return b.bind(args)
}

// callTool runs a bound call. Its frame is all that lies between the
// tool's function and the top of the tool's goroutine, so that a tool that
// waits keeps a small stack.
func callTool(ctx context.Context, run func(context.Context) (any, error)) (v any, err error) {
	defer recoverPanic(&err)
	return run(ctx)
}

// recoverPanic, deferred, turns a panic into a *[PanicError] in *err.
func recoverPanic(err *error) {
	if p := recover(); p != nil {
		*err = &PanicError{Value: p, Stack: debug.Stack()}
	}
}

// end classifies the call's outcome, releases its context and hands the
// result to done; it runs once.
func (inv *invocation) end(value any, err error) {
	r := inv.classify(value, err)
	inv.cancel()
	inv.done(r)
}

// classify makes the result of the tool's outcome: its value, or its error
// mapped as Invoke documents.
func (inv *invocation) classify(value any, err error) ToolResult {
	call := inv.call
	if err == nil {
		text, data := encodeValue(value)
		return inv.finish(ToolResult{CallID: call.ID, Name: call.Name, Content: text, Data: data, Attempt: call.Attempt})
	}
	// A tool that returns its context's error is reporting the context's end:
	// classify it by why the context ended.
	if inv.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		cause := context.Cause(inv.ctx)
		if cause == errToolTimeout || errors.Is(cause, context.DeadlineExceeded) {
			return inv.finish(ErrorResult(call, CodeTimeout, timeoutText(inv.tool, inv.budget, inv.byDeadline)))
		}
		return inv.finish(ErrorResult(call, CodeCanceled, canceledText(inv.tool, cause)))
	}
	return inv.finish(ResultFromError(call, err))
}

// finish stamps the call's duration on its result.
func (inv *invocation) finish(r ToolResult) ToolResult {
	r.DurationMS = float64(time.Since(inv.started).Microseconds()) / 1000
	return r
}

// ResultFromError is the one mapping from a tool's error to the result the
// model sees: a *[PanicError] is a panic, an *[ArgumentError]
// invalid_arguments, a *[CallError] keeps its code and message, anything
// else is a tool_error rendered as "TypeName: message". [Invoke] uses it;
// so does the fleet, so an error reads the same wherever it was found. It
// logs nothing: a panic's value and stack are in the result's
// [ToolResult.Panic], for the caller to log with its own logger.
func ResultFromError(call ToolCall, err error) ToolResult {
	tool := call.Name
	var (
		pe *PanicError
		ae *ArgumentError
		ce *CallError
	)
	switch {
	case errors.As(err, &pe):
		r := ErrorResult(call, CodePanic, fmt.Sprintf("Tool %q panicked: %v", tool, pe.Value))
		r.Error.recovered = pe
		return r
	case errors.Is(err, ErrCallCanceled):
		return ErrorResult(call, CodeCanceled, canceledText(tool, err))
	case errors.As(err, &ae):
		return ErrorResult(call, CodeInvalidArguments, fmt.Sprintf("ArgumentError: %s: %s (rule %q)", ae.Path, ae.Message, ae.Rule))
	case errors.As(err, &ce):
		r := ErrorResult(call, ce.Code, ce.Message)
		r.Error.Retryable, r.Error.RetryAfterMS = ce.Retryable, ce.RetryAfterMS
		if after, ok := IsRetryable(err); ok {
			r.Error.Retryable = true
			r.Error.RetryAfterMS = max(r.Error.RetryAfterMS, after.Milliseconds())
		}
		return r
	}
	var re *RetryableError
	if errors.As(err, &re) {
		r := ErrorResult(call, CodeToolError, errorText(re.Err))
		r.Error.Retryable = true
		r.Error.RetryAfterMS = re.After.Milliseconds()
		return r
	}
	return ErrorResult(call, CodeToolError, errorText(err))
}

// errorText renders an error in the "TypeName: message" style of the
// reference interface. Errors made by errors.New and fmt.Errorf have no
// meaningful type name and render as "Error: message".
func errorText(err error) string {
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := t.Name()
	switch {
	case name == "" || t.PkgPath() == "errors" || t.PkgPath() == "fmt":
		name = "Error"
	}
	return name + ": " + err.Error()
}

func timeoutText(tool string, budget time.Duration, byDeadline bool) string {
	if byDeadline {
		return fmt.Sprintf("Tool %q timed out: the call's deadline passed after %s.", tool, budget.Round(time.Millisecond))
	}
	return fmt.Sprintf("Tool %q timed out after %s.", tool, budget)
}

func canceledText(tool string, cause error) string {
	if errors.Is(cause, ErrCallCanceled) {
		if reason, ok := strings.CutPrefix(cause.Error(), ErrCallCanceled.Error()+": "); ok {
			return fmt.Sprintf("Tool %q was canceled by its caller: %s", tool, reason)
		}
		return fmt.Sprintf("Tool %q was canceled by its caller.", tool)
	}
	if cause == nil || errors.Is(cause, context.Canceled) && cause.Error() == context.Canceled.Error() {
		return fmt.Sprintf("Tool %q was canceled.", tool)
	}
	return fmt.Sprintf("Tool %q was canceled: %v.", tool, cause)
}

// Run executes tool directly, outside an agent, with args encoded by
// [EncodeArguments] (a struct, a map, or JSON text as is). Unlike [Invoke], a failure
// is returned as an *[ExecutionError] alongside the error result, because
// there is no model to recover.
func Run(ctx context.Context, tool Tool, args any) (ToolResult, error) {
	raw, err := EncodeArguments(args)
	if err != nil {
		return ToolResult{}, fmt.Errorf("windlass: run %q: encode arguments: %w", tool.Spec().Name, err)
	}
	var own error
	result := invoke(ctx, tool, ToolCall{ID: NewCallID(), Name: tool.Spec().Name, Arguments: raw}, &own)
	if result.IsError {
		return result, &ExecutionError{Tool: result.Name, Code: result.Error.Code, Message: result.Content, Err: own}
	}
	return result, nil
}

// EncodeArguments turns arguments given in any Go form into the raw JSON a
// [ToolCall] carries: nil is {}; a json.RawMessage, a []byte or a string is
// taken as JSON text as it is; anything else is marshalled. [Run] and the
// dispatcher use it, so every entry point accepts the same forms.
func EncodeArguments(args any) (json.RawMessage, error) {
	switch a := args.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		return a, nil
	case []byte:
		return a, nil
	case string:
		return json.RawMessage(a), nil
	}
	return json.Marshal(args)
}

// Description is the JSON-safe summary of a tool returned by [Describe].
type Description struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Description is the model-facing description.
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments, defaults filled in.
	Parameters map[string]any `json:"parameters"`
	// RequiresApproval is true for gated tools.
	RequiresApproval bool `json:"requires_approval"`
	// ApprovalCondition is the tool's approval condition, if any
	// ([Spec.ApprovalCondition]).
	ApprovalCondition string `json:"approval_condition,omitempty"`
	// TimeoutSeconds is the per-attempt timeout.
	TimeoutSeconds float64 `json:"timeout_seconds"`
	// SpecHash is [Spec.Hash] of the spec.
	SpecHash string `json:"spec_hash"`
}

// Describe returns a JSON-safe summary of tool: its spec with defaults, its
// schema and whether it requires approval.
func Describe(tool Tool) Description {
	s := tool.Spec().WithDefaults()
	return Description{
		Name:              s.Name,
		Description:       s.Description,
		Parameters:        normalizeJSON(s.Parameters),
		RequiresApproval:  s.RequiresApproval,
		ApprovalCondition: s.ApprovalCondition,
		TimeoutSeconds:    s.Timeout.Seconds(),
		SpecHash:          s.Hash(),
	}
}
