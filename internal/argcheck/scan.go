package argcheck

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/windlass-dev/windlass/internal/jsontext"
)

// SurelyValid reads the arguments' JSON, building no decoded value, and
// reports whether they are valid for sure: a JSON object, its numbers
// within q's NumberBounds, that the schema accepts. A string with escapes,
// a duplicate of a required key, nesting past maxDepth and anything else
// it is not sure of give false, and Validate asks the library. values
// counts the JSON values it read, as [Values] does: all of them when
// valid, so that Validate need not read valid arguments twice to bound
// them.
func (q *Schema) SurelyValid(data []byte) (valid bool, values int) {
	s := scanner{decoder: decoder{data: data}, numbers: q.numbers}
	s.space()
	if !s.at('{') || !s.value(q, 0) {
		return false, s.values
	}
	s.space()
	return s.i == len(data), s.values
}

// scanner walks JSON for SurelyValid, with the decoder's reading of space
// and literals, but building nothing.
type scanner struct {
	decoder
	numbers NumberBounds
	values  int // read so far
}

// value checks the value at s.i against q (nil: any value) and moves past
// it; a byte that starts nothing else is read as a number, which fails
// there if it is not one. The number is read here rather than in a method
// of its own: a call more for each number costs a measurable 3 % on
// arguments of many small values.
func (s *scanner) value(q *Schema, depth int) bool {
	if s.i >= len(s.data) || depth > maxDepth {
		return false
	}
	s.values++
	q, ok := q.effective()
	if !ok {
		return false
	}
	switch c := s.data[s.i]; c {
	case '{':
		return s.object(q, depth)
	case '[':
		return s.array(q, depth)
	case '"':
		str, ok := s.plainString()
		return ok && q.acceptsString(aliasString(str)) // not kept
	case 't', 'f', 'n':
		l := literals[c]
		return s.literal(l.text) && q.takes(l.typ)
	}
	end, ok := jsontext.NumberEnd(s.data, s.i)
	if !ok {
		return false
	}
	lit := s.data[s.i:end]
	s.i = end
	return s.numbers.InRange(string(lit)) && q.acceptsNumber(json.Number(lit))
}

// literals are true, false and null by their first byte.
var literals = [256]struct {
	text string
	typ  types
}{'t': {"true", tBoolean}, 'f': {"false", tBoolean}, 'n': {"null", tNull}}

// effective is the schema a value is checked against: nil (any value) for
// nil and the schema true; ok is false for the schema false.
func (q *Schema) effective() (_ *Schema, ok bool) {
	switch {
	case q == nil || q.always:
		return nil, true
	case q.never:
		return nil, false
	}
	return q, true
}

// allows reports whether q's types include t.
func (q *Schema) allows(t types) bool { return q.types == 0 || q.types&t != 0 }

// takes reports whether q (nil: any value) may take a value of type t
// that is not a string: one with an enum of strings never does.
func (q *Schema) takes(t types) bool { return q == nil || (!q.hasEnum && q.allows(t)) }

// plainString reads a string without escapes (false for one with them, or
// for anything else than a string) and returns its bytes; a string that is
// not valid UTF-8 gives false too.
func (s *scanner) plainString() ([]byte, bool) {
	if !s.at('"') {
		return nil, false
	}
	j := bytes.IndexByte(s.data[s.i+1:], '"')
	if j < 0 {
		return nil, false
	}
	span := s.data[s.i+1 : s.i+1+j]
	if bytes.IndexByte(span, '\\') >= 0 || (!jsontext.PrintableASCII(span) && !plainUTF8(span)) {
		return nil, false
	}
	s.i += j + 2
	return span, true
}

// plainUTF8 reports whether a string's bytes that are not all printable
// ASCII need no unescaping all the same: valid UTF-8 without control
// characters.
func plainUTF8(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(b)
}

// acceptsString checks a string against q (nil: any value).
func (q *Schema) acceptsString(x string) bool {
	return q == nil || (q.allows(tString) && q.lengthWithin(x) && q.inEnum(x))
}

// lengthWithin checks minLength and maxLength, in characters.
func (q *Schema) lengthWithin(x string) bool {
	if q.minLen < 0 && q.maxLen < 0 {
		return true
	}
	n := utf8.RuneCountInString(x)
	return (q.minLen < 0 || n >= q.minLen) && (q.maxLen < 0 || n <= q.maxLen)
}

// inEnum checks enum.
func (q *Schema) inEnum(x string) bool {
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

// acceptsNumber checks a number against q (nil: any value).
func (q *Schema) acceptsNumber(n json.Number) bool {
	if q == nil {
		return true
	}
	if q.hasEnum || !q.takesNumber(n) {
		return false
	}
	if !q.min.set && !q.max.set {
		return true
	}
	f, ok := exactFloat(n)
	return ok && q.min.below(f) && q.max.above(f)
}

// takesNumber reports whether q's types take n: a number, or an integer
// written as one (1.0 and 1e2 are integers too, but the library decides
// those).
func (q *Schema) takesNumber(n json.Number) bool {
	return q.allows(tNumber) || (q.types&tInteger != 0 && integerLiteral(string(n)))
}

// below reports whether the lower bound b (when set) is below f.
func (b bound) below(f float64) bool {
	return !b.set || f > b.v || (!b.exclusive && f == b.v)
}

// above reports whether the upper bound b (when set) is above f.
func (b bound) above(f float64) bool {
	return !b.set || f < b.v || (!b.exclusive && f == b.v)
}

// object checks an object: each member against its property's schema (or
// additionalProperties), and the required keys present, once each.
func (s *scanner) object(q *Schema, depth int) bool {
	if !q.takesObject() {
		return false
	}
	var seen uint64 // the required keys met, by index
	if s.open('}') {
		return q.allRequired(seen)
	}
	for {
		key, ok := s.plainString()
		if !ok || !s.colon() {
			return false
		}
		if seen, ok = q.markRequired(key, seen); !ok {
			return false
		}
		if !s.value(q.property(key), depth+1) {
			return false
		}
		s.space()
		switch s.peek() {
		case ',': // another member follows
			s.i++
			s.space()
		case '}':
			s.i++
			return q.allRequired(seen)
		default:
			return false
		}
	}
}

// takesObject reports whether q (nil: any value) may take an object whose
// required keys the check can count.
func (q *Schema) takesObject() bool {
	return q == nil || (!q.hasEnum && q.allows(tObject) && len(q.required) <= 64)
}

// property is the schema of the member named key (nil: any value).
func (q *Schema) property(key []byte) *Schema {
	if q == nil {
		return nil
	}
	if p, ok := q.props[string(key)]; ok {
		return p
	}
	return q.additional
}

// markRequired adds key to seen, the required keys met, by index; ok is
// false for a required key met twice: the decoder keeps the last, let the
// library decide.
func (q *Schema) markRequired(key []byte, seen uint64) (_ uint64, ok bool) {
	if q == nil {
		return seen, true
	}
	for n, name := range q.required {
		if name != string(key) {
			continue
		}
		if seen&(1<<n) != 0 {
			return seen, false
		}
		seen |= 1 << n
	}
	return seen, true
}

// allRequired reports whether seen holds every required key.
func (q *Schema) allRequired(seen uint64) bool {
	return q == nil || seen == 1<<len(q.required)-1
}

// array checks an array: each element against items, and the number of
// elements.
func (s *scanner) array(q *Schema, depth int) bool {
	if !q.takes(tArray) {
		return false
	}
	n, ok := s.elements(q.itemSchema(), depth)
	return ok && q.itemsWithin(n)
}

// itemSchema is the schema of an array's elements (nil: any value).
func (q *Schema) itemSchema() *Schema {
	if q == nil {
		return nil
	}
	return q.items
}

// elements checks an array's elements against items and counts them.
func (s *scanner) elements(items *Schema, depth int) (n int, ok bool) {
	if s.open(']') {
		return 0, true
	}
	for {
		if !s.value(items, depth+1) {
			return n, false
		}
		n++
		s.space()
		switch s.peek() {
		case ',': // another element follows
			s.i++
			s.space()
		case ']':
			s.i++
			return n, true
		default:
			return n, false
		}
	}
}

// itemsWithin checks minItems and maxItems.
func (q *Schema) itemsWithin(n int) bool {
	return q == nil || ((q.minItems < 0 || n >= q.minItems) && (q.maxItems < 0 || n <= q.maxItems))
}
