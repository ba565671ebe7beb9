// Package jsontext holds the byte-level readers of JSON text that the
// fleet's fast paths share: the argument checker of internal/argcheck and
// the canonical form of package approval/release. Each reads bytes and
// says where a token ends or what it holds. Quote and Unquote are the
// exceptions: a large string's JSON, and back, in one allocation each.
package jsontext

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// NumberEnd reads the JSON number at data[i:],
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns where it ends.
func NumberEnd(data []byte, i int) (end int, ok bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case digits() == 0:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if digits() == 0 {
			return i, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, false
		}
	}
	return i, true
}

// PrintableASCII reports whether b holds only bytes from 0x20 to 0x7f,
// eight at a time: a byte below 0x20 borrows into its own top bit when
// 0x20 is subtracted, a byte from 0x80 has it already, and with neither
// no byte borrows from its neighbour.
func PrintableASCII(b []byte) bool {
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if (x|(x-0x2020202020202020))&0x8080808080808080 != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

// Quote returns s as a JSON string, byte for byte what encoding/json
// writes with HTML escaping off (a json.Encoder after SetEscapeHTML(false)):
// '"' and '\\' escaped, control characters as \b \f \n \r \t or \u00XX,
// invalid UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and \u2029. It
// measures first and allocates once: encoding/json holds a large string
// three times over while it encodes it (measured on a 50 MiB result in
// the worker: BENCHMARKS.md, "Payloads by reference").
func Quote(s string) []byte {
	n := 2
	for i := 0; i < len(s); {
		if plain := plainRun(s, i); plain > 0 {
			n, i = n+plain, i+plain
			continue
		}
		r, size, esc := next(s, i)
		switch {
		case esc != "":
			n += len(esc)
		case r < ' ':
			n += len(`\u00XX`)
		default:
			n += size
		}
		i += size
	}
	b := make([]byte, 0, n)
	b = append(b, '"')
	for i := 0; i < len(s); {
		if plain := plainRun(s, i); plain > 0 {
			b, i = append(b, s[i:i+plain]...), i+plain
			continue
		}
		r, size, esc := next(s, i)
		switch {
		case esc != "":
			b = append(b, esc...)
		case r < ' ':
			b = append(b, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// plainRun is the length of the run of ASCII at s[i:] that a JSON string
// holds as it is (printable, not '"' or '\\').
func plainRun(s string, i int) int {
	j := i
	for j < len(s) {
		if c := s[j]; c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			break
		}
		j++
	}
	return j - i
}

// next decodes the character of s at i: the rune, its size in s, and its
// escape when it has a fixed one. A control character without a short
// escape comes back with none and r < ' '.
func next(s string, i int) (r rune, size int, esc string) {
	if c := s[i]; c < utf8.RuneSelf {
		switch c {
		case '"':
			return rune(c), 1, `\"`
		case '\\':
			return rune(c), 1, `\\`
		case '\b':
			return rune(c), 1, `\b`
		case '\f':
			return rune(c), 1, `\f`
		case '\n':
			return rune(c), 1, `\n`
		case '\r':
			return rune(c), 1, `\r`
		case '\t':
			return rune(c), 1, `\t`
		}
		return rune(c), 1, ""
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size == 1:
		return r, 1, `\ufffd`
	case r == '\u2028':
		return r, size, `\u2028`
	case r == '\u2029':
		return r, size, `\u2029`
	}
	return r, size, ""
}

// Quotes reports whether quoted is Quote(s), without making it.
func Quotes(s string, quoted []byte) bool {
	if len(quoted) < 2 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' {
		return false
	}
	q := quoted[1 : len(quoted)-1]
	for i := 0; i < len(s); {
		if plain := plainRun(s, i); plain > 0 {
			if len(q) < plain || string(q[:plain]) != s[i:i+plain] {
				return false
			}
			q, i = q[plain:], i+plain
			continue
		}
		r, size, esc := next(s, i)
		switch {
		case esc != "":
			if len(q) < len(esc) || string(q[:len(esc)]) != esc {
				return false
			}
			q = q[len(esc):]
		case r < ' ':
			if len(q) < 6 || string(q[:4]) != `\u00` || q[4] != hexDigits[r>>4] || q[5] != hexDigits[r&0xF] {
				return false
			}
			q = q[6:]
		default:
			if len(q) < size || string(q[:size]) != s[i:i+size] {
				return false
			}
			q = q[size:]
		}
		i += size
	}
	return len(q) == 0
}

// Unquote decodes a JSON string, the way encoding/json does, in one
// allocation of the decoded size for what Quote writes (escapes \" \\ \/
// \b \f \n \r \t and \uXXXX outside the surrogates, valid UTF-8 between
// them); anything else (a surrogate pair, invalid UTF-8, bad syntax) goes
// to encoding/json.
func Unquote(quoted []byte) (string, error) {
	n, ok := unquotedLen(quoted)
	if !ok {
		var s string
		err := json.Unmarshal(quoted, &s)
		return s, err
	}
	b := make([]byte, 0, n)
	for q := quoted[1 : len(quoted)-1]; len(q) > 0; {
		if q[0] != '\\' {
			end := bytes.IndexByte(q, '\\')
			if end < 0 {
				end = len(q)
			}
			b, q = append(b, q[:end]...), q[end:]
			continue
		}
		r, size := escaped(q)
		b, q = utf8.AppendRune(b, r), q[size:]
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), nil // b is this function's alone
}

// unquotedLen measures what Unquote's fast path makes of quoted; ok is
// false when it must not take it.
func unquotedLen(quoted []byte) (n int, ok bool) {
	if len(quoted) < 2 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' {
		return 0, false
	}
	q := quoted[1 : len(quoted)-1]
	for len(q) > 0 {
		if q[0] == '\\' {
			r, size := escaped(q)
			if size == 0 {
				return 0, false
			}
			n, q = n+utf8.RuneLen(r), q[size:]
			continue
		}
		end := bytes.IndexByte(q, '\\')
		if end < 0 {
			end = len(q)
		}
		seg := q[:end]
		for _, c := range seg { // a control character or a quote is ASCII, never part of a UTF-8 sequence
			if c < ' ' || c == '"' {
				return 0, false
			}
		}
		if !utf8.Valid(seg) {
			return 0, false
		}
		n, q = n+len(seg), q[end:]
	}
	return n, true
}

// escaped decodes the escape at the start of q; size 0 when the fast path
// does not take it.
func escaped(q []byte) (r rune, size int) {
	if len(q) < 2 {
		return 0, 0
	}
	switch q[1] {
	case '"', '\\', '/':
		return rune(q[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		if len(q) < 6 {
			return 0, 0
		}
		v, err := strconv.ParseUint(string(q[2:6]), 16, 16)
		if err != nil || utf16.IsSurrogate(rune(v)) {
			return 0, 0
		}
		return rune(v), 6
	}
	return 0, 0
}
