package windlass

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
	"unsafe"

	"github.com/windlass-dev/windlass/internal/jsontext"
)

// decodeArguments decodes JSON the way the schema validator's own decoder
// does (encoding/json into any, numbers as json.Number), in one pass and
// with strings that need no unescaping taken straight from the input: they
// share data's memory (no copy), so the value must not outlive the caller's
// use of data, which must not change meanwhile. [ArgumentsSchema.Validate],
// its one caller, drops the value before it returns; the messages it
// builds from it are new strings.
// ok is false for anything it does not handle — invalid JSON, nesting over
// maxFastDepth — and the caller then takes the standard decoder, which
// says what is wrong; so it only ever answers for valid JSON, with the
// value encoding/json gives.
func decodeArguments(data []byte) (v any, ok bool) {
	d := fastDecoder{data: data}
	d.space()
	v, ok = d.value(0)
	if !ok {
		return nil, false
	}
	d.space()
	return v, d.i == len(d.data)
}

// maxFastDepth bounds the nesting the fast decoder follows; deeper
// arguments take the standard decoder (which allows 10,000).
const maxFastDepth = 256

type fastDecoder struct {
	data []byte
	i    int
}

func (d *fastDecoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) value(depth int) (any, bool) {
	if d.i >= len(d.data) || depth > maxFastDepth {
		return nil, false
	}
	switch c := d.data[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, ok := d.str()
		return s, ok
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, false
}

func (d *fastDecoder) literal(lit string) bool {
	if len(d.data)-d.i < len(lit) || string(d.data[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	return true
}

func (d *fastDecoder) object(depth int) (any, bool) {
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.space()
		if d.i >= len(d.data) || d.data[d.i] != ':' {
			return nil, false
		}
		d.i++
		d.space()
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		m[k] = v // a repeated key: the last one wins, as in encoding/json
		if done, ok := d.separator('}'); !ok {
			return nil, false
		} else if done {
			return m, true
		}
	}
}

// separator reads what follows a member of an object or an element of an
// array: a comma (another follows) or the closing byte (done).
func (d *fastDecoder) separator(closing byte) (done, ok bool) {
	d.space()
	if d.i >= len(d.data) {
		return false, false
	}
	switch d.data[d.i] {
	case ',':
		d.i++
		d.space()
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
}

func (d *fastDecoder) array(depth int) (any, bool) {
	d.i++ // [
	a := []any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return a, true
	}
	for {
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if done, ok := d.separator(']'); !ok {
			return nil, false
		} else if done {
			return a, true
		}
	}
}

// str reads a string; one with escapes or non-ASCII bytes is handed to
// encoding/json (which also replaces invalid UTF-8 as it does everywhere).
func (d *fastDecoder) str() (string, bool) {
	// The usual string: up to the next quote, no backslash, printable ASCII.
	if j := bytes.IndexByte(d.data[d.i+1:], '"'); j >= 0 {
		span := d.data[d.i+1 : d.i+1+j]
		if bytes.IndexByte(span, '\\') < 0 && jsontext.PrintableASCII(span) {
			d.i += j + 2
			return aliasString(span), true
		}
	}
	start := d.i
	d.i++ // "
	plainASCII := true
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			if plainASCII {
				return aliasString(d.data[start+1 : d.i-1]), true
			}
			var s string
			if json.Unmarshal(d.data[start:d.i], &s) != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plainASCII = false
			d.i += 2
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			plainASCII = false
			d.i++
		default:
			d.i++
		}
	}
	return "", false
}

// aliasString is b as a string without a copy; see decodeArguments.
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// number reads a JSON number.
func (d *fastDecoder) number() (any, bool) {
	end, ok := jsontext.NumberEnd(d.data, d.i)
	if !ok {
		return nil, false
	}
	start := d.i
	d.i = end
	return json.Number(d.data[start:end]), true
}
