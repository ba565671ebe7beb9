// Package argcheck is the fast path of argument validation, package
// windlass's ArgumentsSchema.Validate: a quick check that reads the
// arguments' JSON against a subset of JSON Schema and answers only "valid
// for sure" ([Schema.SurelyValid]), and a decoder that builds the value the
// JSON Schema library validates without copying plain strings ([Decode]).
// Neither words an error: whatever they are not sure of falls through to
// the standard decoder and the library (santhosh-tekuri/jsonschema), which
// have the last word.
//
// FuzzQuickCheckAgrees checks that the quick check never accepts what the
// library refuses; FuzzDecode that the decoder answers only for valid
// JSON, with the standard decoder's value.
package argcheck

import (
	"strconv"
	"strings"
)

// NumberBounds are the bounds on the numbers in arguments that Validate
// enforces before any schema (package windlass's MaxNumberLength and
// MaxNumberExponent): the quick check takes only numbers within them.
type NumberBounds struct {
	// MaxLength bounds the characters of a number's literal.
	MaxLength int
	// MaxExponent bounds the exponent ("e…") on either side.
	MaxExponent int
}

// InRange reports whether the JSON number literal lit is within the
// bounds.
func (b NumberBounds) InRange(lit string) bool {
	if len(lit) > b.MaxLength {
		return false
	}
	i := strings.IndexAny(lit, "eE")
	if i < 0 {
		return true
	}
	exp, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
	return err == nil && exp >= -b.MaxExponent && exp <= b.MaxExponent
}
