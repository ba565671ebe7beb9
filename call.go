package windlass

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"
)

// ProtocolVersion is the version of the wire format in PROTOCOL.md. It
// changes only when a field changes meaning, a required field is added or
// the layout of subjects changes (version 2: a subject per call).
const ProtocolVersion = 2

// MaxCallIDLength bounds a call id; see [ValidateCallID].
const MaxCallIDLength = 128

// ToolCall is one request to run a tool, as it travels on the wire.
type ToolCall struct {
	// ID identifies the call and is its deduplication key: submitting the
	// same id twice runs the call once. See [ValidateCallID].
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is a JSON object matching the tool's parameters schema.
	// Empty or null means {}.
	Arguments json.RawMessage `json:"arguments"`
	// Deadline is when the caller stops waiting (schedule-to-close). Zero
	// means none beyond the tool's own timeout.
	Deadline time.Time `json:"deadline,omitzero"`
	// Attempt counts deliveries to a worker, starting at 1.
	Attempt int `json:"attempt,omitempty"`
	// SpecHash is the [Spec.Hash] of the schema the caller saw, so a worker
	// with a different spec refuses instead of running mismatched arguments.
	SpecHash string `json:"spec_hash,omitempty"`
	// Metadata carries caller-defined strings (requester, session, ...).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Key names the caller the call is counted for, by the fleet's
	// limits (see package limits): the API key's name over HTTP and MCP,
	// the dispatcher's WithKey in Go. Empty is the shared key "default".
	Key string `json:"key,omitempty"`
	// ArgumentsRef, on the wire, points at arguments too large for the
	// call's message, stored in the fleet's object store; Arguments then
	// holds [ArgumentsByReference]. The fleet fetches them before a tool
	// runs, so a tool never sees a reference.
	ArgumentsRef *PayloadRef `json:"arguments_ref,omitempty"`
}

// ToolResult is the outcome of one call, as it travels on the wire.
type ToolResult struct {
	// CallID is the ToolCall's ID.
	CallID string `json:"call_id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Content is the text for the model: [Render] of the value on success,
	// the error text on failure.
	Content string `json:"content"`
	// Data is the tool's value as JSON (absent on failure).
	Data json.RawMessage `json:"data,omitempty"`
	// IsError is true when the call failed; Error then says why.
	IsError bool `json:"is_error"`
	// Error classifies a failure; nil on success.
	Error *CallError `json:"error,omitempty"`
	// DurationMS is how long the tool ran, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// Worker names the worker that produced the result (empty when local).
	Worker string `json:"worker,omitempty"`
	// Attempt is the delivery attempt that produced the result.
	Attempt int `json:"attempt,omitempty"`
	// StartedAt is when the worker started the tool for that attempt; zero
	// when no tool ran (the call was refused, canceled before it started,
	// or answered by the fleet itself).
	StartedAt time.Time `json:"started_at,omitzero"`
	// ContentRef and DataRef, on the wire, point at a content and a value
	// too large for the result's message, stored in the fleet's object
	// store; Content and Data are then empty. ContentRef names DataRef's
	// object when the content is the value's text; it is absent, with
	// DataRef set, when the content is the string the value holds. The
	// dispatcher fetches them before it hands the result to its caller,
	// so a caller never sees a reference.
	ContentRef *PayloadRef `json:"content_ref,omitempty"`
	DataRef    *PayloadRef `json:"data_ref,omitempty"`
}

// Decode unmarshals the result's Data into v. It fails for an error result.
func (r ToolResult) Decode(v any) error {
	if r.IsError {
		return fmt.Errorf("windlass: result of call %q is an error: %s", r.CallID, r.Content)
	}
	if len(r.Data) == 0 {
		return fmt.Errorf("windlass: result of call %q has no data", r.CallID)
	}
	return json.Unmarshal(r.Data, v)
}

// Code returns the result's error code, or "" for a success.
func (r ToolResult) Code() ErrorCode {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

// Panic returns the panic the call's tool ended in, with its stack, for the
// caller to log: set on a panic result in the process that recovered it
// ([Invoke], [InvokeAsync], [ResultFromError] of a *[PanicError]); nil on
// any other result, and on every result decoded from JSON (a stack does not
// travel).
func (r ToolResult) Panic() *PanicError {
	if r.Error == nil {
		return nil
	}
	return r.Error.recovered
}

// ErrorResult builds a failed result for call with the given code and message.
func ErrorResult(call ToolCall, code ErrorCode, message string) ToolResult {
	return ToolResult{
		CallID:  call.ID,
		Name:    call.Name,
		Content: message,
		IsError: true,
		Error:   &CallError{Code: code, Message: message},
		Attempt: call.Attempt,
	}
}

// NewCallID returns a new random call id: "call_" and 26 base32 characters
// (130 bits from crypto/rand), the form of [rand.Text].
func NewCallID() string {
	const prefix = "call_"
	var id [len(prefix) + 26]byte // on the stack: one allocation, the string
	copy(id[:], prefix)
	random := id[len(prefix):]
	_, _ = rand.Read(random) // never fails (crypto/rand's contract)
	for i, b := range random {
		random[i] = base32Alphabet[b&31]
	}
	return string(id[:])
}

// base32Alphabet is RFC 4648's, as [rand.Text] uses.
const base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// ValidateCallID checks a call id: 1 to [MaxCallIDLength] printable ASCII
// characters without spaces, quotes or backslashes. Model providers' own
// tool-call ids (call_…, toolu_…) pass, so they can be used as call ids.
func ValidateCallID(id string) error {
	if len(id) == 0 || len(id) > MaxCallIDLength {
		return fmt.Errorf("windlass: call id must be 1 to %d characters, got %d", MaxCallIDLength, len(id))
	}
	if id == "." || id == ".." {
		// A call's URL is /v1/calls/{id}: as a path segment "." and ".."
		// are dot-segments, which URL parsers (browsers', fetch's) resolve
		// away, escaped or not.
		return fmt.Errorf("windlass: call id %q is not allowed (a URL's dot-segment)", id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("windlass: call id %q: character %q at byte %d is not allowed (printable ASCII without spaces, quotes or backslashes)", id, rune(c), i)
		}
	}
	return nil
}

// Validate checks the call's envelope: a valid id, a valid tool name and
// arguments that are a JSON object (or empty). It does not check the
// arguments against a schema; see [CompileArguments].
func (c ToolCall) Validate() error {
	if err := ValidateCallID(c.ID); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	if err := ValidateName(c.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if c.ArgumentsRef != nil {
		if err := c.ArgumentsRef.Validate(); err != nil {
			return fmt.Errorf("windlass: call %q: arguments_ref: %w", c.ID, err)
		}
		if !noArguments(c.Arguments) && string(bytes.TrimSpace(c.Arguments)) != ArgumentsByReference {
			return fmt.Errorf("windlass: call %q: arguments must be %s when arguments_ref is set", c.ID, ArgumentsByReference)
		}
	} else if !isJSONObject(c.Arguments) {
		return fmt.Errorf("windlass: call %q: arguments must be a JSON object", c.ID)
	}
	if c.Attempt < 0 {
		return fmt.Errorf("windlass: call %q: attempt must not be negative, got %d", c.ID, c.Attempt)
	}
	return nil
}

// noArguments reports whether raw stands for no arguments: empty or null.
func noArguments(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) == 0 || string(b) == "null"
}

// isJSONObject reports whether raw is no arguments (see noArguments) or a
// syntactically valid JSON object.
func isJSONObject(raw json.RawMessage) bool {
	if noArguments(raw) {
		return true
	}
	b := bytes.TrimSpace(raw)
	return b[0] == '{' && json.Valid(b)
}

// CallInfo is what a running tool can learn about its call from its context,
// for instance to make side effects idempotent by call id.
type CallInfo struct {
	// ID is the call id, stable across redeliveries.
	ID string
	// Name is the tool's name.
	Name string
	// Attempt is the delivery attempt, starting at 1.
	Attempt int
	// Deadline is the call's overall deadline (zero when none).
	Deadline time.Time
	// Metadata is the caller's metadata.
	Metadata map[string]string
}

type callInfoKey struct{}

// ContextWithCallInfo returns a context carrying info. [Invoke] does this for
// every call; use it to test a tool on its own.
func ContextWithCallInfo(ctx context.Context, info CallInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, info)
}

// CallInfoFromContext returns the call a tool is running for, if any.
func CallInfoFromContext(ctx context.Context) (CallInfo, bool) {
	info, ok := ctx.Value(callInfoKey{}).(CallInfo)
	return info, ok
}
