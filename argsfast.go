package windlass

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/windlass-dev/windlass/internal/jsontext"
)

// quickSchema is a schema compiled for a quick check of arguments that
// answers only "valid for sure". It knows a subset of JSON Schema (draft
// 2020-12) — the keywords the schemas of [FuncTool] use and most tools
// write by hand: type, properties, required, additionalProperties, items,
// enum of strings, string and array lengths, and numeric bounds — and
// answers false whenever it is not sure; [ArgumentsSchema.Validate] then
// asks the JSON Schema library, which has the last word and words the
// error. A schema with any other keyword gets no quick check at all.
//
// It exists for speed: the library allocates a dozen times and walks its
// generic validator for every call, on the dispatcher and again on the
// worker, though nearly every call is valid. FuzzQuickCheckAgrees checks
// that it never accepts what the library refuses.
type quickSchema struct {
	always, never bool // the schemas true and false
	types         quickTypes
	props         map[string]*quickSchema
	required      []string
	additional    *quickSchema // nil: any value
	enum          []string     // the allowed strings, when hasEnum
	hasEnum       bool
	minLen        int // in characters; -1: none
	maxLen        int
	minItems      int // -1: none
	maxItems      int
	items         *quickSchema // nil: any value
	min, max      quickBound
}

// quickTypes is a set of JSON types; 0 means every type.
type quickTypes uint8

const (
	qObject quickTypes = 1 << iota
	qArray
	qString
	qNumber
	qInteger
	qBoolean
	qNull
)

var quickTypeNames = map[string]quickTypes{
	"object": qObject, "array": qArray, "string": qString, "number": qNumber,
	"integer": qInteger, "boolean": qBoolean, "null": qNull,
}

// quickBound is an inclusive or exclusive numeric bound.
type quickBound struct {
	set, exclusive bool
	v              float64
}

// quickAnnotations are keywords that never make a value invalid.
var quickAnnotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "$comment": true,
}

// compileQuick compiles a decoded schema (numbers as json.Number) into a
// quick check; ok is false when it uses anything the check does not know.
func compileQuick(doc any) (q *quickSchema, ok bool) {
	switch d := doc.(type) {
	case bool:
		return &quickSchema{always: d, never: !d}, true
	case map[string]any:
		q = &quickSchema{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
		for k, v := range d {
			if quickAnnotations[k] {
				continue
			}
			if !q.keyword(k, v) {
				return nil, false
			}
		}
		return q, true
	}
	return nil, false
}

// keyword compiles one keyword of a schema object.
func (q *quickSchema) keyword(k string, v any) bool {
	switch k {
	case "type":
		return q.compileTypes(v)
	case "properties":
		props, ok := v.(map[string]any)
		if !ok {
			return false
		}
		q.props = make(map[string]*quickSchema, len(props))
		for name, sub := range props {
			var p *quickSchema
			if !compileInto(&p, sub) {
				return false
			}
			q.props[name] = p
		}
		return true
	case "required":
		var ok bool
		q.required, ok = quickStrings(v)
		return ok
	case "additionalProperties":
		return compileInto(&q.additional, v)
	case "items":
		return compileInto(&q.items, v)
	case "enum":
		var ok bool
		q.enum, ok = quickStrings(v)
		q.hasEnum = true
		return ok
	case "minLength":
		return quickCount(v, &q.minLen)
	case "maxLength":
		return quickCount(v, &q.maxLen)
	case "minItems":
		return quickCount(v, &q.minItems)
	case "maxItems":
		return quickCount(v, &q.maxItems)
	case "minimum":
		return quickBoundOf(v, &q.min, false)
	case "exclusiveMinimum":
		return quickBoundOf(v, &q.min, true)
	case "maximum":
		return quickBoundOf(v, &q.max, false)
	case "exclusiveMaximum":
		return quickBoundOf(v, &q.max, true)
	}
	return false
}

// compileInto compiles a subschema into *dst.
func compileInto(dst **quickSchema, v any) bool {
	var ok bool
	*dst, ok = compileQuick(v)
	return ok
}

// quickStrings reads a keyword's list of strings.
func quickStrings(v any) ([]string, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func (q *quickSchema) compileTypes(v any) bool {
	names, ok := v.([]any)
	if s, isString := v.(string); isString {
		names, ok = []any{s}, true
	}
	if !ok || len(names) == 0 {
		return false
	}
	for _, n := range names {
		s, _ := n.(string)
		t, known := quickTypeNames[s]
		if !known {
			return false
		}
		q.types |= t
	}
	return true
}

// quickCount reads a non-negative integer keyword.
func quickCount(v any, dst *int) bool {
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

// quickBoundOf reads a numeric bound. One bound of each side only: a schema
// with both minimum and exclusiveMinimum gets no quick check.
func quickBoundOf(v any, dst *quickBound, exclusive bool) bool {
	n, ok := v.(json.Number)
	if !ok || dst.set {
		return false
	}
	f, ok := exactFloat(n)
	if !ok {
		return false
	}
	*dst = quickBound{set: true, exclusive: exclusive, v: f}
	return true
}

// exactFloat converts a JSON number to a float64 when comparing floats
// orders it exactly as the decimal value: at most 15 significant digits
// (so two different such decimals never round to one float64, and
// rounding keeps their order) and a finite, normal result, zero only for
// a zero.
func exactFloat(n json.Number) (float64, bool) {
	digits, leading := 0, true
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == 'e' || c == 'E' {
			break
		}
		if c < '0' || c > '9' || (leading && c == '0') {
			continue
		}
		leading = false
		digits++
	}
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

// acceptsString checks a string.
func (q *quickSchema) acceptsString(x string) bool {
	if !q.allows(qString) {
		return false
	}
	if q.minLen >= 0 || q.maxLen >= 0 {
		n := utf8.RuneCountInString(x)
		if (q.minLen >= 0 && n < q.minLen) || (q.maxLen >= 0 && n > q.maxLen) {
			return false
		}
	}
	if !q.hasEnum {
		return true
	}
	for _, e := range q.enum {
		if e == x {
			return true
		}
	}
	return false
}

func (q *quickSchema) allows(t quickTypes) bool { return q.types == 0 || q.types&t != 0 }

func (q *quickSchema) acceptsNumber(n json.Number) bool {
	switch {
	case q.types == 0 || q.types&qNumber != 0:
	case q.types&qInteger != 0 && integerLiteral(string(n)):
	default:
		return false // not a number it may take, or an integer written as 1.0 or 1e2: the library decides
	}
	if !q.min.set && !q.max.set {
		return true
	}
	f, ok := exactFloat(n)
	if !ok {
		return false
	}
	if q.min.set && (f < q.min.v || (q.min.exclusive && f == q.min.v)) {
		return false
	}
	if q.max.set && (f > q.max.v || (q.max.exclusive && f == q.max.v)) {
		return false
	}
	return true
}

// acceptsJSON reads the arguments' JSON, building no decoded value, and
// reports whether it is valid for sure: a JSON object, within the number
// bounds Validate enforces, that the schema accepts. A string with
// escapes, a duplicate of a required key, nesting past maxFastDepth and
// anything else it is not sure of give false, and Validate asks the
// library.
func (q *quickSchema) acceptsJSON(data []byte) bool {
	s := quickScanner{fastDecoder{data: data}}
	s.space()
	if s.i >= len(data) || data[s.i] != '{' {
		return false
	}
	if !s.value(q, 0) {
		return false
	}
	s.space()
	return s.i == len(data)
}

// quickScanner walks JSON for acceptsJSON, with the fast decoder's
// reading of space and literals but building nothing.
type quickScanner struct{ fastDecoder }

// value checks the value at s.i against q (nil: any value) and moves past
// it.
func (s *quickScanner) value(q *quickSchema, depth int) bool {
	if s.i >= len(s.data) || depth > maxFastDepth {
		return false
	}
	if q != nil {
		switch {
		case q.never:
			return false
		case q.always:
			q = nil
		}
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object(q, depth)
	case c == '[':
		return s.array(q, depth)
	case c == '"':
		str, ok := s.plainString()
		return ok && (q == nil || q.acceptsString(aliasString(str))) // not kept
	case c == '-' || (c >= '0' && c <= '9'):
		end, ok := jsontext.NumberEnd(s.data, s.i)
		if !ok {
			return false
		}
		lit := s.data[s.i:end]
		s.i = end
		return numberInRange(string(lit)) && (q == nil || (!q.hasEnum && q.acceptsNumber(json.Number(lit))))
	case c == 't':
		return s.literal("true") && (q == nil || (!q.hasEnum && q.allows(qBoolean)))
	case c == 'f':
		return s.literal("false") && (q == nil || (!q.hasEnum && q.allows(qBoolean)))
	case c == 'n':
		return s.literal("null") && (q == nil || (!q.hasEnum && q.allows(qNull)))
	}
	return false
}

// plainString reads a string without escapes (false for one with them) and
// returns its bytes; a string that is not valid UTF-8 gives false too.
func (s *quickScanner) plainString() ([]byte, bool) {
	j := bytes.IndexByte(s.data[s.i+1:], '"')
	if j < 0 {
		return nil, false
	}
	span := s.data[s.i+1 : s.i+1+j]
	if bytes.IndexByte(span, '\\') >= 0 {
		return nil, false
	}
	if !jsontext.PrintableASCII(span) {
		for _, c := range span {
			if c < 0x20 {
				return nil, false
			}
		}
		if !utf8.Valid(span) {
			return nil, false
		}
	}
	s.i += j + 2
	return span, true
}

func (s *quickScanner) object(q *quickSchema, depth int) bool {
	if q != nil && (q.hasEnum || !q.allows(qObject) || len(q.required) > 64) {
		return false
	}
	var seen uint64 // the required keys met, by index
	s.i++           // {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return q == nil || len(q.required) == 0
	}
	for {
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return false
		}
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		var sub *quickSchema
		if q != nil {
			if p, ok := q.props[string(key)]; ok {
				sub = p
			} else {
				sub = q.additional
			}
			for n, name := range q.required {
				if name == string(key) {
					if seen&(1<<n) != 0 {
						return false // a duplicate: the decoder keeps the last, let it decide
					}
					seen |= 1 << n
				}
			}
		}
		if !s.value(sub, depth+1) {
			return false
		}
		s.space()
		if s.i >= len(s.data) {
			return false
		}
		switch s.data[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			return q == nil || seen == 1<<len(q.required)-1
		default:
			return false
		}
	}
}

func (s *quickScanner) array(q *quickSchema, depth int) bool {
	if q != nil && (q.hasEnum || !q.allows(qArray)) {
		return false
	}
	var items *quickSchema
	if q != nil {
		items = q.items
	}
	n := 0
	s.i++ // [
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
	} else {
		for {
			if !s.value(items, depth+1) {
				return false
			}
			n++
			s.space()
			if s.i >= len(s.data) {
				return false
			}
			if s.data[s.i] == ']' {
				s.i++
				break
			}
			if s.data[s.i] != ',' {
				return false
			}
			s.i++
			s.space()
		}
	}
	return q == nil || ((q.minItems < 0 || n >= q.minItems) && (q.maxItems < 0 || n <= q.maxItems))
}
