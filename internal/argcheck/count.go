package argcheck

import "bytes"

// Values counts the JSON values in data — each number, string, boolean,
// null, array and object one; an object's keys are not values — and stops
// once the count passes limit, reporting over. It reads the bytes once and
// builds nothing, so arguments too large to decode cheaply are refused
// before anything decodes them: decoded into the schema library's values,
// each small value costs tens of bytes (a 16 MiB array of zeros grew the
// heap by about 600 MiB).
//
// The count is exact for valid JSON. Invalid JSON gets some count (each
// byte that could start a value counts at most one) and is left to the
// decoders, which say what is wrong. Hand-written rather than a loop over
// a tokenizer's tokens: it is one pass of the bytes that allocates nothing,
// on every call's arguments; FuzzValuesCountsTokens checks it against
// go-json-experiment's jsontext.
func Values(data []byte, limit int) (n int, over bool) {
	prev := byte(' ') // the byte before c outside strings
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '"':
			i = stringEnd(data, i)
			if !followedByColon(data, i+1) { // an object's key is not a value
				n++
			}
		case c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n':
			n++
		case (c >= '0' && c <= '9' || c == '-') && !inNumber(prev):
			n++
		}
		if n > limit {
			return n, true
		}
		prev = c
	}
	return n, false
}

// stringEnd is the index of the quote that ends the string whose opening
// quote is at data[i], or len(data) when it does not end.
func stringEnd(data []byte, i int) int {
	for i++; ; i++ {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return len(data)
		}
		i += q
		escapes := 0 // the backslashes just before: an odd number escape it
		for j := i - 1; data[j] == '\\'; j-- {
			escapes++
		}
		if escapes%2 == 0 {
			return i
		}
	}
}

// followedByColon reports whether the first byte at or after data[i] that
// is not JSON space is a colon.
func followedByColon(data []byte, i int) bool {
	for ; i < len(data); i++ {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

// inNumber reports whether a byte may come before a digit or a minus sign
// in the middle of a JSON number (1.5, 1e-5, 12), so that the digit does
// not start a value of its own.
func inNumber(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}
