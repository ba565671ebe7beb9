package argcheck

import (
	"encoding/json"
	"strconv"
)

// Schema is a JSON Schema compiled for a quick check of arguments that
// answers only "valid for sure". It knows a subset of JSON Schema (draft
// 2020-12) — the keywords the schemas of package windlass's FuncTool use
// and most tools write by hand: type, properties, required,
// additionalProperties, items, enum of strings, string and array lengths,
// and numeric bounds — and answers false whenever it is not sure; Validate
// then asks the JSON Schema library, which has the last word and words the
// error. A schema with any other keyword gets no quick check at all.
//
// It exists for speed: the library needs the decoded value and allocates
// as it walks its generic validator, for every call, on the dispatcher and
// again on the worker, though nearly every call is valid.
type Schema struct {
	always, never bool // the schemas true and false
	types         types
	props         map[string]*Schema
	required      []string
	additional    *Schema  // nil: any value
	enum          []string // the allowed strings, when hasEnum
	hasEnum       bool
	minLen        int // in characters; -1: none
	maxLen        int
	minItems      int // -1: none
	maxItems      int
	items         *Schema // nil: any value
	min, max      bound
	numbers       NumberBounds // of the whole arguments; set on the top schema only
}

// types is a set of JSON types; 0 means every type.
type types uint8

const (
	tObject types = 1 << iota
	tArray
	tString
	tNumber
	tInteger
	tBoolean
	tNull
)

var typeNames = map[string]types{
	"object": tObject, "array": tArray, "string": tString, "number": tNumber,
	"integer": tInteger, "boolean": tBoolean, "null": tNull,
}

// bound is an inclusive or exclusive numeric bound.
type bound struct {
	set, exclusive bool
	v              float64
}

// annotations are keywords that never make a value invalid.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "$comment": true,
}

// Compile compiles a decoded schema (numbers as json.Number, as the
// library's decoder gives them) into a quick check of arguments whose
// numbers must be within numbers; ok is false when the schema uses
// anything the check does not know.
func Compile(doc any, numbers NumberBounds) (q *Schema, ok bool) {
	q, ok = compile(doc)
	if !ok {
		return nil, false
	}
	q.numbers = numbers
	return q, true
}

// compile compiles a schema or a subschema.
func compile(doc any) (q *Schema, ok bool) {
	switch d := doc.(type) {
	case bool:
		return &Schema{always: d, never: !d}, true
	case map[string]any:
		q = &Schema{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
		for k, v := range d {
			if !annotations[k] && !q.keyword(k, v) {
				return nil, false
			}
		}
		return q, true
	}
	return nil, false
}

// keyword compiles one keyword of a schema object.
func (q *Schema) keyword(k string, v any) bool {
	switch k {
	case "type":
		return q.compileTypes(v)
	case "properties":
		return q.compileProperties(v)
	case "required":
		return stringList(v, &q.required)
	case "enum":
		q.hasEnum = true
		return stringList(v, &q.enum)
	case "additionalProperties":
		return compileInto(&q.additional, v)
	case "items":
		return compileInto(&q.items, v)
	}
	if dst := q.countKeyword(k); dst != nil {
		return count(v, dst)
	}
	if dst, exclusive := q.boundKeyword(k); dst != nil {
		return boundOf(v, dst, exclusive)
	}
	return false
}

// countKeyword is where the count of keyword k goes; nil when k is not
// one.
func (q *Schema) countKeyword(k string) *int {
	switch k {
	case "minLength":
		return &q.minLen
	case "maxLength":
		return &q.maxLen
	case "minItems":
		return &q.minItems
	case "maxItems":
		return &q.maxItems
	}
	return nil
}

// boundKeyword is where the numeric bound of keyword k goes; nil when k
// is not one.
func (q *Schema) boundKeyword(k string) (dst *bound, exclusive bool) {
	switch k {
	case "minimum":
		return &q.min, false
	case "exclusiveMinimum":
		return &q.min, true
	case "maximum":
		return &q.max, false
	case "exclusiveMaximum":
		return &q.max, true
	}
	return nil, false
}

// compileInto compiles a subschema into *dst.
func compileInto(dst **Schema, v any) bool {
	var ok bool
	*dst, ok = compile(v)
	return ok
}

// compileProperties compiles the subschemas of "properties".
func (q *Schema) compileProperties(v any) bool {
	props, ok := v.(map[string]any)
	if !ok {
		return false
	}
	q.props = make(map[string]*Schema, len(props))
	for name, sub := range props {
		p, ok := compile(sub)
		if !ok {
			return false
		}
		q.props[name] = p
	}
	return true
}

// stringList reads a keyword's list of strings into *dst.
func stringList(v any, dst *[]string) bool {
	list, ok := v.([]any)
	if !ok {
		return false
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return false
		}
		out = append(out, s)
	}
	*dst = out
	return true
}

// compileTypes reads "type": a name or a non-empty list of names.
func (q *Schema) compileTypes(v any) bool {
	names, ok := v.([]any)
	if s, isString := v.(string); isString {
		names, ok = []any{s}, true
	}
	if !ok || len(names) == 0 {
		return false
	}
	for _, n := range names {
		s, _ := n.(string)
		t, known := typeNames[s]
		if !known {
			return false
		}
		q.types |= t
	}
	return true
}

// count reads a non-negative integer keyword.
func count(v any, dst *int) bool {
	n, ok := v.(json.Number)
	if !ok || !integerLiteral(string(n)) {
		return false
	}
	i, err := strconv.Atoi(string(n))
	if err != nil || i < 0 {
		return false
	}
	*dst = i
	return true
}

// boundOf reads a numeric bound. One bound of each side only: a schema
// with both minimum and exclusiveMinimum gets no quick check.
func boundOf(v any, dst *bound, exclusive bool) bool {
	n, ok := v.(json.Number)
	if !ok || dst.set {
		return false
	}
	f, ok := exactFloat(n)
	if !ok {
		return false
	}
	*dst = bound{set: true, exclusive: exclusive, v: f}
	return true
}

// exactFloat converts a JSON number to a float64 when comparing floats
// orders it exactly as the decimal value: at most 15 significant digits
// (so two different such decimals never round to one float64, and
// rounding keeps their order) and a finite, normal result, zero only for
// a zero.
func exactFloat(n json.Number) (float64, bool) {
	digits := significantDigits(string(n))
	if digits > 15 {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	switch {
	case err != nil: // out of range
		return 0, false
	case (f == 0) != (digits == 0): // 1e-400 rounds to 0 without an error
		return 0, false
	case f != 0 && f < 1e-300 && f > -1e-300: // near or below the subnormals
		return 0, false
	}
	return f, true
}

// significantDigits counts the digits of a JSON number's mantissa from
// its first that is not 0.
func significantDigits(n string) int {
	digits := 0
	for i := 0; i < len(n) && n[i] != 'e' && n[i] != 'E'; i++ {
		if c := n[i]; (c >= '1' && c <= '9') || (digits > 0 && c == '0') {
			digits++
		}
	}
	return digits
}

// integerLiteral reports whether a JSON number is written as an integer
// (no fraction, no exponent).
func integerLiteral(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return false
		}
	}
	return len(s) > 0
}
