package mcptool

import (
	"strconv"
)

// maxName is the longest fleet tool name.
const maxName = 64

// sanitize makes prefix+name a valid fleet tool name: each character other
// than an ASCII letter, digit, '_' or '-' becomes one '_', and it is cut to
// 64 characters.
func sanitize(prefix, name string) string {
	b := make([]byte, 0, len(prefix)+len(name))
	for _, c := range prefix + name {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b = append(b, byte(c))
		} else {
			b = append(b, '_')
		}
	}
	if len(b) == 0 {
		return "tool"
	}
	if len(b) > maxName {
		b = b[:maxName]
	}
	return string(b)
}

// unique returns base, or base with the first suffix "_2", "_3", … that
// taken does not hold, cut so that it stays within 64 characters.
func unique(base string, taken func(string) bool) string {
	if !taken(base) {
		return base
	}
	for i := 2; ; i++ {
		suffix := "_" + strconv.Itoa(i)
		cand := base[:min(len(base), maxName-len(suffix))] + suffix
		if !taken(cand) {
			return cand
		}
	}
}
