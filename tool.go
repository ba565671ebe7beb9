package windlass

import (
	"context"
	"encoding/json"
	"fmt"
)

// Tool is a capability an agent can call: a Go function, an HTTP call, a
// database query, a remote endpoint. A local function, a stateful client and
// a proxy for a tool on another machine all satisfy it, so an agent cannot
// tell them apart.
//
// Implementations must be safe for concurrent use. Call should honour ctx:
// it ends at the call's deadline or the tool's timeout, whichever is first.
type Tool interface {
	// Spec describes the tool. It must return the same value on every call.
	Spec() Spec
	// Call runs the tool with raw JSON arguments matching Spec().Parameters
	// and returns any JSON-encodable value, or an error. Return a
	// *[CallError] to choose the error code of the result, or an
	// *[ArgumentError] for arguments that do not fit.
	Call(ctx context.Context, args json.RawMessage) (any, error)
}

// CallFunc is the signature of a tool's body over raw JSON arguments.
type CallFunc func(ctx context.Context, args json.RawMessage) (any, error)

// RawTool is a [Tool] made from a [Spec] and a [CallFunc]: for tools whose
// schema is not a Go type (dynamic tools, proxies). It checks arguments
// against the spec's schema before calling the function.
type RawTool struct {
	spec     Spec
	args     *ArgumentsSchema
	callFunc CallFunc
}

// NewTool returns a tool with the given spec (defaults filled in) whose body
// is fn. The spec is validated and its parameters schema compiled once here.
func NewTool(spec Spec, fn CallFunc) (*RawTool, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: tool %q: the call function is nil", ErrInvalidSpec, spec.Name)
	}
	spec = spec.WithDefaults()
	args, err := CompileArguments(spec)
	if err != nil {
		return nil, err
	}
	return &RawTool{spec: spec, args: args, callFunc: fn}, nil
}

// Spec implements [Tool].
func (t *RawTool) Spec() Spec { return t.spec }

// Call implements [Tool]: it validates args, then calls the function.
func (t *RawTool) Call(ctx context.Context, args json.RawMessage) (any, error) {
	return callBound(ctx, t, args)
}

func (t *RawTool) bind(args json.RawMessage) (func(context.Context) (any, error), error) {
	if err := t.args.Validate(args); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (any, error) { return t.callFunc(ctx, args) }, nil
}

// binder is a tool that checks its arguments (and decodes them) apart
// from running: [InvokeAsync] binds them on the caller's goroutine, so that
// the tool's goroutine runs only the tool's function, on a stack the
// checking has not grown.
type binder interface {
	// bind checks args and returns the call of the function with them.
	bind(args json.RawMessage) (func(context.Context) (any, error), error)
}

// callBound is a binder's Call: bind, then run.
func callBound(ctx context.Context, b binder, args json.RawMessage) (any, error) {
	run, err := b.bind(args)
	if err != nil {
		return nil, err
	}
	return run(ctx)
}
