package argcheck

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzDecode checks the decoder against the standard one: whenever it
// answers, the input is valid JSON and the value is the standard
// decoder's.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1,"b":[true,false,null,-0.5e+3,"x"]}`, ` {"a" : {"b":{}}, "a":2 } `, `{"é":"\u00e9\n","k":"\ud800"}`,
		`[1,2,`, `{"a":01}`, `{"a":"` + "\x01" + `"}`, `"x"`, `-`, `1.`, `1e`, `{"a":"\xff"}`, `{"a":1}x`, `[]`, `[[[[]]]]`,
		`{"a":"x\"y"}`, `{"a\\"b":1}`, `"\`, `{"a":tru}`, `{"a":nul}`, `{"a" 1}`, `{"a":1,}`, `[1 2]`,
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), // the deepest it decodes
		strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2), // the standard decoder's
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := Decode(data)
		std, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("fast decoder accepted %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q: fast %#v, standard %#v", data, fast, std)
		}
	})
}

// TestDecodeDepth pins where the decoder hands over to the standard one.
func TestDecodeDepth(t *testing.T) {
	for n, want := range map[int]bool{maxDepth + 1: true, maxDepth + 2: false} {
		data := strings.Repeat("[", n) + strings.Repeat("]", n)
		if _, ok := Decode([]byte(data)); ok != want {
			t.Errorf("Decode of %d nested arrays: ok %v, want %v", n, ok, want)
		}
	}
}
