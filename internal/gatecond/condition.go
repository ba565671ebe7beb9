package gatecond

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
)

// CostLimit bounds one evaluation: CEL's runtime cost (about one unit per
// operation, more for string and list work in proportion to their size).
// An evaluation that would exceed it stops with [ErrCost]; an expression
// whose cheapest evaluation exceeds it is refused by [Compile].
const CostLimit = 10_000

// MaxLength is the longest expression accepted, in bytes.
const MaxLength = 4096

// maxNesting bounds the parser's recursion: deeply nested input cannot
// exhaust the stack.
const maxNesting = 64

// ErrCost is the error of an evaluation stopped at [CostLimit].
var ErrCost = errors.New("gatecond: evaluation exceeded its cost limit")

// Error is the refusal of an expression: where it is wrong (1-based line
// and column, in characters; 0 when the error has no position) and why.
type Error struct {
	Line, Column int
	Reason       string
}

// Error implements error: "line:column: reason".
func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Reason
	}
	return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Reason)
}

// Condition is a compiled approval condition, safe for concurrent use.
type Condition struct {
	expr string
	prg  cel.Program
}

// env is the one CEL environment of conditions: the variable args, a map
// from string to any JSON value, and the standard library, numbers of
// different types comparable to each other (JSON numbers decode as
// doubles, so args.amount > 100 compares a double with an int).
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserRecursionLimit(maxNesting),
		cel.ParserExpressionSizeLimit(MaxLength),
	)
})

// Compile checks expr and prepares it for evaluation. The error is an
// [*Error] with the position and the reason of the first problem.
func Compile(expr string) (*Condition, error) {
	if len(expr) > MaxLength {
		return nil, &Error{Reason: fmt.Sprintf("the expression is %d bytes, over the limit of %d", len(expr), MaxLength)}
	}
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("gatecond: the CEL environment: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		errs := iss.Errors()
		first := errs[0]
		// CEL's column is 0-based, -1 when unknown (an empty input).
		return nil, &Error{Line: max(first.Location.Line(), 1), Column: max(first.Location.Column()+1, 1), Reason: first.Message}
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		return nil, &Error{Line: 1, Column: 1, Reason: fmt.Sprintf("the expression is of type %s, want bool (compare a value, e.g. args.flag == true)", ast.OutputType())}
	}
	est, err := e.EstimateCost(ast, unknownSizes{})
	if err != nil {
		return nil, &Error{Line: 1, Column: 1, Reason: fmt.Sprintf("its cost cannot be estimated: %v", err)}
	}
	if est.Min > CostLimit {
		return nil, &Error{Line: 1, Column: 1, Reason: fmt.Sprintf("its cheapest evaluation costs %d, over the limit of %d", est.Min, CostLimit)}
	}
	prg, err := e.Program(ast, cel.CostLimit(CostLimit))
	if err != nil {
		return nil, &Error{Line: 1, Column: 1, Reason: err.Error()}
	}
	return &Condition{expr: expr, prg: prg}, nil
}

// String returns the expression.
func (c *Condition) String() string { return c.expr }

// Eval evaluates the condition on a call's arguments (a JSON object; null
// or empty means none). An error says why it has no answer: arguments
// that are not an object, a missing field or a type the expression does
// not expect (use has(args.x) for optional fields), or [ErrCost].
func (c *Condition) Eval(args json.RawMessage) (bool, error) {
	input := map[string]any{}
	if len(args) > 0 {
		var v any
		if err := json.Unmarshal(args, &v); err != nil {
			return false, fmt.Errorf("gatecond: the arguments do not decode: %w", err)
		}
		switch v := v.(type) {
		case nil:
		case map[string]any:
			input = v
		default:
			return false, fmt.Errorf("gatecond: the arguments are %T, not a JSON object", v)
		}
	}
	out, _, err := c.prg.Eval(map[string]any{"args": input})
	if err != nil {
		if isCostLimit(err) {
			return false, fmt.Errorf("%w (%d): %v", ErrCost, CostLimit, err)
		}
		return false, fmt.Errorf("gatecond: %w", err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("gatecond: the condition evaluated to %v, not a bool", out)
	}
	return b, nil
}

// unknownSizes is the cost estimator of registration: the size of every
// argument is unknown (any), so only an expression that is expensive
// whatever its input is refused there.
type unknownSizes struct{}

func (unknownSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }
func (unknownSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// isCostLimit reports whether err stopped an evaluation at its cost limit.
func isCostLimit(err error) bool {
	var c interpreter.EvalCancelledError
	return errors.As(err, &c) && c.Cause == interpreter.CostLimitExceeded
}
