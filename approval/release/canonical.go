package release

import (
	"bytes"
	"slices"
	"unicode/utf8"

	"github.com/windlass-dev/windlass/internal/jsontext"
)

// canonicalFast appends the canonical form of args (see [Canonical]) to dst for the
// JSON callers send in practice — strings without escapes — written
// without decoding into Go values: encoding/json's decode and re-encode
// took 92 µs for 8 KiB of arguments (one long string) against 5 µs for the
// rest of a dispatcher's work on a call, and every call with a caller's own
// id pays it (the id_conflict check). ok is false for anything it does not
// handle — an escape or a control character in a string, invalid UTF-8,
// U+2028 or U+2029 (which encoding/json escapes), a key given twice (the
// last one wins there), nesting past maxCanonicalDepth, invalid JSON — and
// the caller takes the encoding/json path, which decides. A fuzz test
// checks it agrees with that path whenever it answers.
func canonicalFast(dst, args []byte) (out []byte, ok bool) {
	c := canonicalizer{data: args}
	c.space()
	out, ok = c.value(dst, 0)
	if !ok {
		return nil, false
	}
	c.space()
	return out, c.i == len(c.data)
}

// maxCanonicalDepth bounds the nesting canonicalFast follows.
const maxCanonicalDepth = 128

type canonicalizer struct {
	data []byte
	i    int
}

func (c *canonicalizer) space() {
	for c.i < len(c.data) {
		switch c.data[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// value appends the canonical form of the value at c.i to out.
func (c *canonicalizer) value(out []byte, depth int) ([]byte, bool) {
	if c.i >= len(c.data) || depth > maxCanonicalDepth {
		return nil, false
	}
	switch b := c.data[c.i]; {
	case b == '{':
		return c.object(out, depth)
	case b == '[':
		return c.array(out, depth)
	case b == '"':
		s, ok := c.str()
		return append(out, s...), ok
	case b == 't':
		return c.literal(out, "true")
	case b == 'f':
		return c.literal(out, "false")
	case b == 'n':
		return c.literal(out, "null")
	case b == '-' || b >= '0' && b <= '9':
		return c.number(out)
	}
	return nil, false
}

func (c *canonicalizer) literal(out []byte, lit string) ([]byte, bool) {
	if !bytes.HasPrefix(c.data[c.i:], []byte(lit)) {
		return nil, false
	}
	c.i += len(lit)
	return append(out, lit...), true
}

// str returns the string token at c.i, quotes included, when it is already
// in the form encoding/json writes: no escapes, no control characters,
// valid UTF-8 without U+2028 and U+2029.
func (c *canonicalizer) str() ([]byte, bool) {
	start := c.i
	n := bytes.IndexByte(c.data[start+1:], '"')
	if n < 0 {
		return nil, false
	}
	inner := c.data[start+1 : start+1+n]
	if bytes.IndexByte(inner, '\\') >= 0 {
		return nil, false // an escape (and the quote found may be escaped)
	}
	if !jsontext.PrintableASCII(inner) {
		for _, b := range inner {
			if b < 0x20 {
				return nil, false // a control character, which encoding/json escapes
			}
		}
		if !utf8.Valid(inner) || bytes.Contains(inner, []byte("\u2028")) || bytes.Contains(inner, []byte("\u2029")) {
			return nil, false
		}
	}
	c.i = start + 2 + n
	return c.data[start:c.i], true
}

// number appends the number at c.i as written, once it is a valid JSON
// number.
func (c *canonicalizer) number(out []byte) ([]byte, bool) {
	end, ok := jsontext.NumberEnd(c.data, c.i)
	if !ok {
		return nil, false
	}
	out = append(out, c.data[c.i:end]...)
	c.i = end
	return out, true
}

func (c *canonicalizer) array(out []byte, depth int) ([]byte, bool) {
	c.i++ // [
	out = append(out, '[')
	c.space()
	if c.i < len(c.data) && c.data[c.i] == ']' {
		c.i++
		return append(out, ']'), true
	}
	for first := true; ; first = false {
		if !first {
			out = append(out, ',')
		}
		c.space()
		var ok bool
		if out, ok = c.value(out, depth+1); !ok {
			return nil, false
		}
		c.space()
		if c.i >= len(c.data) {
			return nil, false
		}
		switch c.data[c.i] {
		case ',':
			c.i++
		case ']':
			c.i++
			return append(out, ']'), true
		default:
			return nil, false
		}
	}
}

// member is one object member as written to the output: its key token
// (quotes included) and where the member starts and ends.
type member struct {
	key        []byte
	start, end int
}

// object writes the members to out as they come; only when their keys are
// out of order does it copy them aside and write them again, sorted.
func (c *canonicalizer) object(out []byte, depth int) ([]byte, bool) {
	c.i++ // {
	out = append(out, '{')
	c.space()
	if c.i < len(c.data) && c.data[c.i] == '}' {
		c.i++
		return append(out, '}'), true
	}
	var members []member
	sorted := true
	for {
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != '"' {
			return nil, false
		}
		key, ok := c.str()
		if !ok {
			return nil, false
		}
		if n := len(members); n > 0 {
			switch cmp := bytes.Compare(members[n-1].key, key); {
			case cmp == 0:
				return nil, false // encoding/json keeps the last; let it
			case cmp > 0:
				sorted = false
			}
			out = append(out, ',')
		}
		start := len(out)
		out = append(out, key...)
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != ':' {
			return nil, false
		}
		c.i++
		out = append(out, ':')
		c.space()
		if out, ok = c.value(out, depth+1); !ok {
			return nil, false
		}
		members = append(members, member{key: key, start: start, end: len(out)})
		c.space()
		if c.i >= len(c.data) {
			return nil, false
		}
		if c.data[c.i] == '}' {
			c.i++
			break
		}
		if c.data[c.i] != ',' {
			return nil, false
		}
		c.i++
	}
	if !sorted {
		// Keys without escapes: their bytes order them as their strings do.
		first := members[0].start
		written := slices.Clone(out[first:])
		slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		out = out[:first]
		for k, m := range members {
			if k > 0 {
				if bytes.Equal(m.key, members[k-1].key) {
					return nil, false
				}
				out = append(out, ',')
			}
			out = append(out, written[m.start-first:m.end-first]...)
		}
	}
	return append(out, '}'), true
}
