package release

import (
	"bytes"
	"testing"
)

// FuzzCanonicalFast checks the fast canonical form against encoding/json's
// (canonicalSlow): whenever the fast one answers, the slow one accepts the
// input too and writes the same bytes.
func FuzzCanonicalFast(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":1}`, `{"b":1,"a":2}`, `{ "b" : [1, 2.50, -0, 1e5, 1E-3] , "a" : {"y":true,"x":null} }`,
		`{"a":"é<>&\u2028"}`, `{"a":"\u00e9"}`, `{"a":1,"a":2}`, `{"é":1,"e":2,"z":3,"A":4}`, `[1,"x",{}]`, `"x"`,
		`{"a":"` + "\x7f" + `"}`, `{"a":"\xff"}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1}x`, `{"a" 1}`, `[1,]`, `{"data":"xxxx"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := bytes.TrimSpace(data)
		fast, ok := canonicalFast(nil, b)
		if !ok {
			return
		}
		slow, err := canonicalSlow(b)
		if err != nil {
			t.Fatalf("fast accepted %q (%q), encoding/json refused it: %v", data, fast, err)
		}
		if !bytes.Equal(fast, slow) {
			t.Fatalf("%q: fast %q, encoding/json %q", data, fast, slow)
		}
	})
}

func BenchmarkCanonical(b *testing.B) {
	args := []byte(`{"data":"` + string(bytes.Repeat([]byte("x"), 8170)) + `"}`)
	unsorted := []byte(`{"to":"bob","amount":5,"currency":"EUR","memo":{"z":[1,2,3],"a":"rent for december"}}`)
	for _, c := range []struct {
		name string
		args []byte
	}{{"8KiB", args}, {"unsorted", unsorted}} {
		b.Run(c.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ArgumentsHash(c.args); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := canonicalSlow(c.args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
