package argcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// tokenValues counts the values of valid JSON with go-json-experiment's
// tokenizer: every token but an end of an object or array and an
// object's key. ok is false for anything but one valid JSON value (the
// tokenizer reads a stream of them).
func tokenValues(data []byte) (n int, ok bool) {
	if !json.Valid(data) {
		return 0, false
	}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return n, true
		}
		if err != nil {
			return 0, false
		}
		if k := tok.Kind(); k == '}' || k == ']' {
			continue
		}
		if kind, length := dec.StackIndex(dec.StackDepth()); kind == '{' && length%2 == 1 {
			continue // the key just read
		}
		n++
	}
}

// FuzzValuesCountsTokens checks Values against the tokenizer on valid
// JSON, and the limit on any input: over exactly when the count passes it.
func FuzzValuesCountsTokens(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `[[]]`, `0`, `-1.5e-7`, `"x"`, `{"a":1,"b":[true,false,null,-0.5e+3,"x"]}`,
		` { "a" : { "b" : {} } , "c" : [ 1 , -2 , 3e+4 ] } `, `{"a\"b:":"c\\","d":"\"e\":"}`,
		`{"k":"\u0022:"}`, `[1,2,`, `{"a" 1}`, `nnnn`, `{"a":tru}`, `"\`,
	} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, data []byte, limit int) {
		if limit < 0 {
			limit = -limit
		}
		all, over := Values(data, len(data)+1)
		if over {
			t.Fatalf("%q: %d values, more than its %d bytes", data, all, len(data))
		}
		if want, ok := tokenValues(data); ok && all != want {
			t.Fatalf("%q: Values counted %d, the tokenizer %d", data, all, want)
		}
		n, over := Values(data, limit)
		if over != (all > limit) || over && n != limit+1 || !over && n != all {
			t.Fatalf("%q, limit %d: Values = %d, %v; all %d", data, limit, n, over, all)
		}
	})
}

// TestValuesStopsAtTheLimit: a 16 MiB array of zeros is found over a
// limit of 100,000 without allocating, and stops being read there.
func TestValuesStopsAtTheLimit(t *testing.T) {
	data := []byte("[" + strings.Repeat("0,", 8<<20-1) + "0]")
	if n, over := Values(data, len(data)); over || n != 8<<20+1 {
		t.Fatalf("Values = %d, %v; want %d values", n, over, 8<<20+1)
	}
	var n int
	var over bool
	if allocs := testing.AllocsPerRun(5, func() { n, over = Values(data, 100_000) }); allocs != 0 || !over || n != 100_001 {
		t.Fatalf("Values = %d, %v with %v allocations; want 100001, over, none", n, over, allocs)
	}
}
