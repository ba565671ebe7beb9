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

// FuzzQuotesAgrees: Quotes(s, q) holds exactly when q is Quote(s).
func FuzzQuotesAgrees(f *testing.F) {
	for _, s := range []string{"", "plain", `a"b\c`, "\b\x00\n", "é\u2028", "\xff bad"} {
		f.Add(s, string(Quote(s)))
		f.Add(s, `"`+s+`"`)
	}
	f.Fuzz(func(t *testing.T, s, q string) {
		if got, want := Quotes(s, []byte(q)), string(Quote(s)) == q; got != want {
			t.Fatalf("Quotes(%q, %q) = %v, want %v", s, q, got, want)
		}
		if !Quotes(s, Quote(s)) {
			t.Fatalf("Quotes(%q, Quote(it)) = false", s)
		}
	})
}

// FuzzUnquoteAgrees: Unquote decodes any text as encoding/json does, and
// gives back what Quote encoded (as encoding/json reads it back).
func FuzzUnquoteAgrees(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"a\"b\\c\/d"`, `"\b\f\n\r\t\u0000\u001f"`, `"\u00e9\u2028\ufffd"`, `"\ud83d\ude80"`, `"\ud83d"`, "\"\xff\"", `"a`, `"a"b"`, "\"\x01\"", `"\u12"`, `"\x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want string
		wantErr := json.Unmarshal(b, &want)
		got, err := Unquote(b)
		if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
			t.Fatalf("Unquote(%q) = %q, %v; encoding/json: %q, %v", b, got, err, want, wantErr)
		}
		var back string
		if err := json.Unmarshal(Quote(string(b)), &back); err != nil {
			t.Fatal(err)
		}
		if got, err := Unquote(Quote(string(b))); err != nil || got != back {
			t.Fatalf("Unquote(Quote(%q)) = %q, %v; want %q", b, got, err, back)
		}
	})
}
