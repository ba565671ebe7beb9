package windlass

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"github.com/windlass-dev/windlass/internal/argcheck"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ArgumentsSchema is a tool's parameters schema compiled for validating
// arguments. Compile it once per spec with [CompileArguments]; Validate is
// safe for concurrent use.
type ArgumentsSchema struct {
	tool      string
	maxValues int // the spec's bound on the values in arguments
	schema    *jsonschema.Schema
	quick     *argcheck.Schema // nil: the schema uses keywords the quick check does not know
}

var englishPrinter = message.NewPrinter(language.English)

// CompileArguments compiles spec's parameters schema (JSON Schema draft
// 2020-12 unless the schema says otherwise). An invalid schema is an error
// wrapping [ErrInvalidSpec].
func CompileArguments(spec Spec) (*ArgumentsSchema, error) {
	spec = spec.WithDefaults()
	raw, err := json.Marshal(spec.Parameters)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters: %w", ErrInvalidSpec, spec.Name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters: %w", ErrInvalidSpec, spec.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "windlass:///parameters.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters: %w", ErrInvalidSpec, spec.Name, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: parameters are not a valid JSON Schema: %w", ErrInvalidSpec, spec.Name, err)
	}
	quick, ok := argcheck.Compile(doc, numberBounds)
	if !ok {
		quick = nil
	}
	return &ArgumentsSchema{tool: spec.Name, maxValues: spec.argumentValues(), schema: s, quick: quick}, nil
}

// Validate checks raw arguments against the schema. Empty or null
// arguments are {}.
// A failure is an *[ArgumentError] naming the path and the rule of the first
// violation (the most specific one when several nested rules fail).
//
// Valid arguments of the usual schemas are seen valid without decoding
// them; everything else is decoded and checked by the JSON Schema library,
// which words the error. Arguments of more JSON values than the spec's
// bound ([Spec.ArgumentValueLimit]) are refused, rule "values", before
// anything decodes them.
func (a *ArgumentsSchema) Validate(args json.RawMessage) error {
	if noArguments(args) {
		args = json.RawMessage("{}")
	}
	if a.quick != nil {
		switch valid, values := a.quick.SurelyValid(args); {
		case valid && values <= a.maxValues:
			return nil // valid for sure, seen without decoding
		case valid:
			return a.refuseValues()
		}
	}
	// Nothing is decoded past maxValues values: a decoder builds every
	// value up to the end, or an error. Invalid JSON counts at most a
	// value a byte that could start one, so a decoder that stops at its
	// error built no more.
	if _, over := argcheck.Values(args, a.maxValues); over {
		if !json.Valid(args) { // said as invalid JSON, as within the bound
			err := json.Unmarshal(args, new(json.RawMessage)) // checks, builds nothing
			return a.refuse("$", "json", "arguments are not valid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
		}
		return a.refuseValues()
	}
	// The decoded value may share args' memory (argcheck.Decode); nothing
	// built from it outlives this call but new strings.
	v, ok := argcheck.Decode(args)
	if !ok { // invalid JSON (or very deep): the standard decoder says what is wrong
		var err error
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(args)); err != nil {
			return a.refuse("$", "json", "arguments are not valid JSON: "+err.Error())
		}
	}
	return a.validateValue(v)
}

// refuseValues is the refusal of arguments of more values than the
// tool's bound.
func (a *ArgumentsSchema) refuseValues() *ArgumentError {
	return a.refuse("$", "values", englishPrinter.Sprintf(
		"arguments hold more than %d JSON values (each number, string, boolean, null, array and object counts one), the tool's max_argument_values", a.maxValues))
}

// validateValue checks decoded arguments, as the library's decoder gives
// them: an object, its numbers in range, then the schema.
func (a *ArgumentsSchema) validateValue(v any) error {
	if _, ok := v.(map[string]any); !ok {
		return a.refuse("$", "type", fmt.Sprintf("arguments must be a JSON object, got %s", jsonKind(v)))
	}
	if loc, n, ok := outOfRangeNumber(v, nil); ok {
		return a.refuse(jsonPath(v, loc), "number", fmt.Sprintf(
			"number %s is out of range: a number may have at most %d characters and an exponent from -%d to %d", abbreviate(string(n), 40), MaxNumberLength, MaxNumberExponent, MaxNumberExponent))
	}
	err := a.schema.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return a.refuse("$", "schema", err.Error())
	}
	return a.refuseViolation(v, deepest(ve))
}

// refuseViolation builds the error of the library's most specific
// violation, leaf, in the arguments v.
func (a *ArgumentsSchema) refuseViolation(v any, leaf *jsonschema.ValidationError) *ArgumentError {
	loc := leaf.InstanceLocation
	rule := "schema"
	if kw := leaf.ErrorKind.KeywordPath(); len(kw) > 0 {
		rule = kw[len(kw)-1]
	}
	msg := leaf.ErrorKind.LocalizedString(englishPrinter)
	if b, ok := boundMessage(leaf.ErrorKind); ok {
		msg = b
	}
	if req, ok := leaf.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		loc = append(slices.Clip(loc), req.Missing[0])
		msg = "required property is missing"
		if len(req.Missing) > 1 {
			msg = fmt.Sprintf("required properties are missing: %s", strings.Join(req.Missing, ", "))
		}
	}
	return a.refuse(jsonPath(v, loc), rule, msg)
}

// boundMessage words a numeric bound's violation as a rule ("must be
// greater than 0, got 0"), where the library's "got 0, want 0" leaves the
// reader to guess which side of the bound was wanted.
func boundMessage(k jsonschema.ErrorKind) (string, bool) {
	var rule string
	var got, want *big.Rat
	switch k := k.(type) {
	case *kind.Minimum:
		rule, got, want = "at least", k.Got, k.Want
	case *kind.ExclusiveMinimum:
		rule, got, want = "greater than", k.Got, k.Want
	case *kind.Maximum:
		rule, got, want = "at most", k.Got, k.Want
	case *kind.ExclusiveMaximum:
		rule, got, want = "less than", k.Got, k.Want
	default:
		return "", false
	}
	if got == nil || want == nil {
		return "", false
	}
	return fmt.Sprintf("must be %s %s, got %s", rule, ratText(want), ratText(got)), true
}

// ratText writes a bound or a number as JSON would: 1, 2.5, 1e+21.
func ratText(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Bounds on what an [ArgumentError] quotes of the arguments, so that a huge
// key or value makes a short error (and a result that fits in a message).
const (
	maxPathTokenLength = 64   // bytes of one key in a path
	maxPathLength      = 1024 // bytes of a path, elided in the middle beyond
	maxMessageLength   = 1024 // bytes of a message, cut beyond
)

// refuse builds the *ArgumentError of a violation, with the path and the
// message bounded.
func (a *ArgumentsSchema) refuse(path, rule, msg string) *ArgumentError {
	if len(path) > maxPathLength {
		path = headRunes(path, maxPathLength/2) + "…" + tailRunes(path, maxPathLength/2)
	}
	return &ArgumentError{Tool: a.tool, Path: path, Rule: rule, Message: abbreviate(msg, maxMessageLength)}
}

// MaxNumberLength and MaxNumberExponent bound the numbers in arguments:
// [ArgumentsSchema.Validate] refuses a number written with more than
// MaxNumberLength characters or with an exponent ("e…") beyond
// ±MaxNumberExponent (rule "number"). Far wider than a 64-bit float's range
// and precision, the bounds keep a schema's numeric keywords (minimum,
// multipleOf, uniqueItems, ...) from doing arbitrary-precision arithmetic
// on hostile numbers such as 1e1000000000, which the schema library cannot
// represent.
const (
	MaxNumberLength   = 100
	MaxNumberExponent = 400
)

// numberBounds are MaxNumberLength and MaxNumberExponent for package
// argcheck.
var numberBounds = argcheck.NumberBounds{MaxLength: MaxNumberLength, MaxExponent: MaxNumberExponent}

// outOfRangeNumber finds a number in a decoded JSON value (json.Number,
// since it was decoded with UseNumber) outside the bounds of
// [MaxNumberLength] and [MaxNumberExponent], and its location. Object keys
// are visited in sorted order, so the same arguments always name the same
// number. The decoder bounds the nesting, hence the recursion.
func outOfRangeNumber(v any, loc []string) ([]string, json.Number, bool) {
	if !hasOutOfRangeNumber(v) {
		return nil, "", false // the usual case, found without sorting keys
	}
	switch v := v.(type) {
	case json.Number:
		if !numberBounds.InRange(string(v)) {
			return loc, v, true
		}
	case []any:
		for i, e := range v {
			if l, n, ok := outOfRangeNumber(e, append(loc, strconv.Itoa(i))); ok {
				return l, n, true
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if l, n, ok := outOfRangeNumber(v[k], append(loc, k)); ok {
				return l, n, true
			}
		}
	}
	return nil, "", false
}

// hasOutOfRangeNumber reports whether v holds a number outside the bounds,
// visiting maps in any order (no allocation).
func hasOutOfRangeNumber(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return !numberBounds.InRange(string(v))
	case []any:
		for _, e := range v {
			if hasOutOfRangeNumber(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if hasOutOfRangeNumber(e) {
				return true
			}
		}
	}
	return false
}

// abbreviate shortens s to at most n bytes and an ellipsis.
func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return headRunes(s, n) + "…"
}

// headRunes is the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence.
func headRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tailRunes is the longest suffix of s of at most n bytes that does not
// split a UTF-8 sequence.
func tailRunes(s string, n int) string {
	i := max(len(s)-n, 0)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// deepest follows the first cause down to the most specific violation.
func deepest(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}

// jsonPath renders the location loc in the arguments v as "$.a.b[0]": an
// element of an array as [i]; a key of an object as .key when it is a
// plain name (a letter or "_", then letters, digits and "_"), else in
// brackets as a JSON string, ["0"] or ["a.b"], so that no key reads as an
// index or as two keys. Keys longer than maxPathTokenLength are
// abbreviated. A token past what v holds (a missing required key) is a
// key.
func jsonPath(v any, loc []string) string {
	var b strings.Builder
	b.WriteString("$")
	for _, tok := range loc {
		switch node := v.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			v = nil
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(node) {
				v = node[i]
			}
		default:
			writeKey(&b, tok)
			m, _ := node.(map[string]any)
			v = m[tok]
		}
	}
	return b.String()
}

// writeKey writes an object's key into a path: .key or ["key"].
func writeKey(b *strings.Builder, key string) {
	short := abbreviate(key, maxPathTokenLength)
	if plainName(key) {
		b.WriteString("." + short)
		return
	}
	var q bytes.Buffer
	enc := json.NewEncoder(&q)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(short) // a string always encodes
	b.WriteString("[" + strings.TrimSuffix(q.String(), "\n") + "]")
}

// plainName reports whether a key is a letter or "_" followed by letters,
// digits and "_": one JSONPath writes after a dot (RFC 9535's
// member-name-shorthand allows these and more).
func plainName(key string) bool {
	for i, r := range key {
		if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return key != ""
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
