package windlass

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// DefaultTimeout is the per-attempt timeout of a tool whose Spec leaves
// Timeout zero.
const DefaultTimeout = 30 * time.Second

// NamePattern is the rule every tool name must match: what the major model
// providers accept, and safe as a NATS subject token and consumer name.
const NamePattern = `^[a-zA-Z0-9_-]{1,64}$`

// Spec describes a tool: everything a model, a registry and a worker need to
// know about it except how it runs. The zero values of Parameters and Timeout
// mean their defaults; use [Spec.WithDefaults] to see them filled in.
type Spec struct {
	// Name is the name the model sees. It must match [NamePattern].
	Name string
	// Description is model-facing prompt text: the model picks tools by it.
	Description string
	// Parameters is the JSON Schema object of the arguments. Nil means
	// {"type":"object","properties":{}} (a tool without arguments).
	Parameters map[string]any
	// Timeout bounds one attempt of the tool. Zero means [DefaultTimeout].
	Timeout time.Duration
	// RequiresApproval makes every call wait for a human's approval before
	// it runs. Use it for tools that spend money or change the world.
	RequiresApproval bool
	// ApprovalCondition gates some calls only: a CEL expression over the
	// call's arguments (the variable args, the decoded JSON object; JSON
	// numbers are doubles) that must be of type bool, for instance
	// `args.amount > 100.0 || args.to.startsWith("ext_")`. A call for which
	// it is true waits for a human's approval exactly as under
	// RequiresApproval; one for which it is false runs straight away. A
	// call it cannot be evaluated on (a missing field, a value of another
	// type, an evaluation over its cost limit) is gated: fail closed. Guard
	// optional fields with has(args.x). Empty means none. It cannot be set
	// together with RequiresApproval (Validate refuses the pair), and it is
	// never shown to models; it is part of the spec's JSON
	// ("approval_condition") and hash. See README, "Conditional approval".
	ApprovalCondition string
	// Hints are the tool's optional risk hints (read-only, destructive,
	// idempotent, open-world). Nil (or all unset) means none stated; they
	// are part of the spec's JSON and hash only when set.
	Hints *ToolHints
	// MaxArgumentValues bounds the JSON values a call's arguments may hold
	// (each number, string, boolean, null, array and object counts one);
	// more are refused invalid_arguments, rule "values", before anything
	// decodes them. Zero means [DefaultMaxArgumentValues]. Raise it for a
	// tool that takes large arrays (vectors, series): checking arguments
	// against the schema may take tens of bytes of memory a value. It is
	// part of the spec's JSON ("max_argument_values") and hash only when
	// set.
	MaxArgumentValues int
}

// DefaultMaxArgumentValues is the bound on the JSON values in a call's
// arguments of a tool whose [Spec.MaxArgumentValues] is zero. Checked
// against a schema, each small value costs tens of bytes: without a bound,
// arguments of a 16 MiB array of zeros grew a dispatcher's heap by about
// 600 MiB. A model writes far fewer values.
const DefaultMaxArgumentValues = 100_000

// ArgumentValueLimit is the bound on the JSON values of a call's
// arguments in force: MaxArgumentValues, or [DefaultMaxArgumentValues]
// when it is zero.
func (s Spec) ArgumentValueLimit() int { return s.argumentValues() }

// argumentValues is the spec's bound on the values in arguments.
func (s Spec) argumentValues() int {
	if s.MaxArgumentValues > 0 {
		return s.MaxArgumentValues
	}
	return DefaultMaxArgumentValues
}

// ValidateName reports whether name is a valid tool name. The error names the
// rule and quotes the bad name.
func ValidateName(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fmt.Errorf("%w: name %q must match %s (1 to 64 characters, got %d)", ErrInvalidSpec, name, NamePattern, len(name))
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return fmt.Errorf("%w: name %q must match %s (character %q at byte %d is not a letter, digit, '_' or '-')", ErrInvalidSpec, name, NamePattern, rune(name[i]), i)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// WithDefaults returns a copy of s with the defaults filled in: the empty
// object schema for nil Parameters and [DefaultTimeout] for a zero Timeout.
func (s Spec) WithDefaults() Spec {
	if s.Parameters == nil {
		s.Parameters = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	return s
}

// Validate checks the spec: the name rule, a parameters schema whose type is
// "object" (what providers require of a function's arguments), a
// non-negative timeout, and an approval condition that compiles to a bool
// (a [*ConditionError] with its position and reason). Errors wrap
// [ErrInvalidSpec] and name the field.
func (s Spec) Validate() error {
	if err := ValidateName(s.Name); err != nil {
		return err
	}
	if s.Timeout < 0 {
		return fmt.Errorf("%w: tool %q: timeout must not be negative, got %s", ErrInvalidSpec, s.Name, s.Timeout)
	}
	if s.MaxArgumentValues < 0 {
		return fmt.Errorf("%w: tool %q: max_argument_values must not be negative, got %d", ErrInvalidSpec, s.Name, s.MaxArgumentValues)
	}
	if err := s.validateCondition(); err != nil {
		return err
	}
	if s.Parameters != nil {
		if t, ok := s.Parameters["type"]; !ok || t != "object" {
			return fmt.Errorf("%w: tool %q: parameters.type must be \"object\", got %v", ErrInvalidSpec, s.Name, t)
		}
		if p, ok := s.Parameters["properties"]; ok {
			if _, isMap := p.(map[string]any); !isMap {
				return fmt.Errorf("%w: tool %q: parameters.properties must be an object, got %T", ErrInvalidSpec, s.Name, p)
			}
		}
		if _, err := json.Marshal(s.Parameters); err != nil {
			return fmt.Errorf("%w: tool %q: parameters must be JSON-encodable: %w", ErrInvalidSpec, s.Name, err)
		}
	}
	return nil
}

// specJSON is the wire form of a Spec: snake_case, timeout in milliseconds.
type specJSON struct {
	Name             string         `json:"name"`
	Description      string         `json:"description"`
	Parameters       map[string]any `json:"parameters"`
	TimeoutMS        int64          `json:"timeout_ms"`
	RequiresApproval bool           `json:"requires_approval"`
	Condition        string         `json:"approval_condition,omitempty"`
	Hints            *ToolHints     `json:"hints,omitempty"`
	MaxValues        int            `json:"max_argument_values,omitempty"`
}

// MarshalJSON encodes the spec with its defaults filled in, in the form
// PROTOCOL.md documents (timeout as timeout_ms).
func (s Spec) MarshalJSON() ([]byte, error) {
	d := s.WithDefaults()
	return json.Marshal(specJSON{
		Name:             d.Name,
		Description:      d.Description,
		Parameters:       d.Parameters,
		TimeoutMS:        d.Timeout.Milliseconds(),
		RequiresApproval: d.RequiresApproval,
		Condition:        d.ApprovalCondition,
		Hints:            d.hints(),
		MaxValues:        d.MaxArgumentValues,
	})
}

// UnmarshalJSON decodes the form written by MarshalJSON.
func (s *Spec) UnmarshalJSON(b []byte) error {
	var w specJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.TimeoutMS < 0 || w.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Errorf("%w: timeout_ms out of range: %d", ErrInvalidSpec, w.TimeoutMS)
	}
	if w.MaxValues < 0 {
		return fmt.Errorf("%w: max_argument_values must not be negative, got %d", ErrInvalidSpec, w.MaxValues)
	}
	*s = Spec{
		Name:              w.Name,
		Description:       w.Description,
		Parameters:        w.Parameters,
		Timeout:           time.Duration(w.TimeoutMS) * time.Millisecond,
		RequiresApproval:  w.RequiresApproval,
		ApprovalCondition: w.Condition,
		Hints:             w.Hints,
		MaxArgumentValues: w.MaxValues,
	}
	if s.Hints.IsZero() {
		s.Hints = nil
	}
	return nil
}

// hints returns the spec's hints, or nil when none is stated.
func (s Spec) hints() *ToolHints {
	if s.Hints.IsZero() {
		return nil
	}
	return s.Hints
}

// Hash returns a short, stable fingerprint of everything in the spec a model
// or a worker depends on (name, description, parameters, timeout, approval,
// approval condition, hints and the bound on argument values when stated):
// the hex SHA-256 of its canonical JSON, truncated to 16 bytes. Two specs with
// the same hash are interchangeable; the fleet uses it to detect a caller
// and a worker that disagree on a tool's schema.
func (s Spec) Hash() string {
	b, err := s.MarshalJSON() // map keys are sorted: canonical
	if err != nil {
		// Unencodable parameters fail Validate; hash what is left so the
		// result is still deterministic.
		b = []byte(fmt.Sprintf("unencodable:%s:%v", s.Name, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
