// Package textcut cuts long texts the fleet publishes (event and record
// texts, the approval service's answers) to a bound, on a character
// boundary, with a marker that says a cut was made: a text is advice for a
// person or a model, and must never make its message too large to send.
package textcut

import (
	"fmt"
	"unicode/utf8"
)

// Cut returns s when it is at most n bytes; else its start, cut on a
// character boundary, ending "… [truncated: N bytes in all]", at most n
// bytes in all.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	marker := fmt.Sprintf("… [truncated: %d bytes in all]", len(s))
	cut := max(n-len(marker), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}
