package argcheck

import (
	"bytes"
	"encoding/json"
	"unsafe"

	"github.com/windlass-dev/windlass/internal/jsontext"
)

// Decode decodes JSON the way the schema library's own decoder does
// (encoding/json into any, numbers as json.Number), in one pass and with
// strings that need no unescaping taken straight from the input: they
// share data's memory (no copy), so the value must not outlive the
// caller's use of data, which must not change meanwhile. Validate, its
// one caller, drops the value before it returns; the messages it builds
// from it are new strings.
//
// ok is false for anything it does not handle — invalid JSON, nesting
// over maxDepth — and the caller then takes the standard decoder, which
// says what is wrong; so it only ever answers for valid JSON, with the
// value encoding/json gives.
func Decode(data []byte) (v any, ok bool) {
	d := decoder{data: data}
	d.space()
	v, ok = d.value(0)
	if !ok {
		return nil, false
	}
	d.space()
	return v, d.i == len(d.data)
}

// maxDepth bounds the nesting the decoder and the quick check follow;
// deeper arguments take the standard decoder (which allows 10,000).
const maxDepth = 256

// decoder reads JSON from data[i:].
type decoder struct {
	data []byte
	i    int
}

// space moves past white space.
func (d *decoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// at reports whether the next byte is c.
func (d *decoder) at(c byte) bool { return d.i < len(d.data) && d.data[d.i] == c }

// value decodes the value at d.i, a number for any byte that starts
// nothing else (and fails there if it is not a number).
func (d *decoder) value(depth int) (any, bool) {
	if d.i >= len(d.data) || depth > maxDepth {
		return nil, false
	}
	switch d.data[d.i] {
	case '{':
		return d.object(depth)
	case '[':
		return d.array(depth)
	case '"':
		s, ok := d.str()
		return s, ok
	case 't':
		return true, d.literal("true")
	case 'f':
		return false, d.literal("false")
	case 'n':
		return nil, d.literal("null")
	}
	return d.number()
}

// literal moves past lit, false when the input does not hold it.
func (d *decoder) literal(lit string) bool {
	if len(d.data)-d.i < len(lit) || string(d.data[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	return true
}

// open moves past an object's or an array's opening byte and reports
// whether the closing byte follows at once (and moves past it too).
func (d *decoder) open(closing byte) (empty bool) {
	d.i++
	d.space()
	if d.at(closing) {
		d.i++
		return true
	}
	return false
}

func (d *decoder) object(depth int) (any, bool) {
	m := map[string]any{}
	if d.open('}') {
		return m, true
	}
	for {
		k, ok := d.key()
		if !ok {
			return nil, false
		}
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		m[k] = v // a repeated key: the last one wins, as in encoding/json
		d.space()
		switch d.peek() {
		case ',': // another member follows
			d.i++
			d.space()
		case '}':
			d.i++
			return m, true
		default:
			return nil, false
		}
	}
}

// key reads an object's key and the colon after it.
func (d *decoder) key() (string, bool) {
	if !d.at('"') {
		return "", false
	}
	k, ok := d.str()
	if !ok || !d.colon() {
		return "", false
	}
	return k, true
}

// colon moves past the colon after a key and the space around it.
func (d *decoder) colon() bool {
	d.space()
	if !d.at(':') {
		return false
	}
	d.i++
	d.space()
	return true
}

// peek is the next byte, 0 at the end of the input (which no JSON value
// continues with).
func (d *decoder) peek() byte {
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

func (d *decoder) array(depth int) (any, bool) {
	a := []any{}
	if d.open(']') {
		return a, true
	}
	for {
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		d.space()
		switch d.peek() {
		case ',': // another element follows
			d.i++
			d.space()
		case ']':
			d.i++
			return a, true
		default:
			return nil, false
		}
	}
}

// str reads a string. The usual one — up to the next quote, no
// backslash, printable ASCII — is taken as it is; others go to
// escapedString.
func (d *decoder) str() (string, bool) {
	if j := bytes.IndexByte(d.data[d.i+1:], '"'); j >= 0 {
		span := d.data[d.i+1 : d.i+1+j]
		if bytes.IndexByte(span, '\\') < 0 && jsontext.PrintableASCII(span) {
			d.i += j + 2
			return aliasString(span), true
		}
	}
	return d.escapedString()
}

// escapedString reads a string with escapes or non-ASCII bytes, which
// encoding/json decodes (replacing invalid UTF-8 as it does everywhere).
func (d *decoder) escapedString() (string, bool) {
	start := d.i
	d.i++ // "
	for d.i < len(d.data) {
		switch c := d.data[d.i]; {
		case c == '"':
			d.i++
			var s string
			if json.Unmarshal(d.data[start:d.i], &s) != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			d.i += 2
		case c < 0x20:
			return "", false
		default:
			d.i++
		}
	}
	return "", false
}

// aliasString is b as a string without a copy; see Decode.
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// number reads a JSON number.
func (d *decoder) number() (any, bool) {
	end, ok := jsontext.NumberEnd(d.data, d.i)
	if !ok {
		return nil, false
	}
	start := d.i
	d.i = end
	return json.Number(d.data[start:end]), true
}
