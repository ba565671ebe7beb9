package jsontext

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestPrintableASCII checks the eight-at-a-time test against the plain one
// for every byte at every position of a word and its tail.
func TestPrintableASCII(t *testing.T) {
	for n := 1; n <= 17; n++ {
		for pos := range n {
			for c := range 256 {
				b := bytes.Repeat([]byte{'a'}, n)
				b[pos] = byte(c)
				want := c >= 0x20 && c < 0x80
				if got := PrintableASCII(b); got != want {
					t.Fatalf("PrintableASCII(%q) = %t, want %t", b, got, want)
				}
			}
		}
	}
}

// TestNumberEnd checks the JSON number grammar on the edges.
func TestNumberEnd(t *testing.T) {
	for _, tt := range []struct {
		in   string
		end  int
		want bool
	}{
		{"0", 1, true}, {"-0", 2, true}, {"12.50e+3,", 8, true}, {"1E5}", 3, true},
		{"01", 1, true}, {"-", 1, false}, {"1.", 2, false}, {"1e", 2, false}, {".5", 0, false},
	} {
		end, ok := NumberEnd([]byte(tt.in), 0)
		if end != tt.end || ok != tt.want {
			t.Errorf("NumberEnd(%q) = %d, %t; want %d, %t", tt.in, end, ok, tt.end, tt.want)
		}
	}
}

// FuzzQuoteAgrees: Quote writes what encoding/json writes with HTML
// escaping off, for any string, valid UTF-8 or not.
func FuzzQuoteAgrees(f *testing.F) {
	for _, s := range []string{"", "plain", `a"b\c`, "\b\f\n\r\t\x00\x1f\x7f", "<&>", "é\u2028\u2029\ufffd", "\xff\xfe bad", "\xe2\x80", "🚀 x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
		got := Quote(s)
		if !bytes.Equal(got, want) {
			t.Fatalf("Quote(%q) = %s, want %s", s, got, want)
		}
		if cap(got) != len(got) {
			t.Errorf("Quote(%q): capacity %d for %d bytes: measured wrong", s, cap(got), len(got))
		}
	})
}
