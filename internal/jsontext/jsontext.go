// Package jsontext holds the byte-level readers of JSON text that the
// fleet's fast paths share: the argument checker of internal/argcheck and
// the canonical form of package approval/release. Each reads bytes and
// says where a token ends or what it holds; none decodes.
package jsontext

import "encoding/binary"

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
