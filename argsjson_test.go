package windlass

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzDecodeArguments checks the fast decoder against the standard one:
// whenever it answers, the input is valid JSON and the value is the
// standard decoder's.
func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1,"b":[true,false,null,-0.5e+3,"x"]}`, ` {"a" : {"b":{}}, "a":2 } `, `{"é":"\u00e9\n","k":"\ud800"}`,
		`[1,2,`, `{"a":01}`, `{"a":"` + "\x01" + `"}`, `"x"`, `-`, `1.`, `1e`, `{"a":"\xff"}`, `{"a":1}x`, `[]`, `[[[[]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeArguments(data)
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
