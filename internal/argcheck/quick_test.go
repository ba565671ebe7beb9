package argcheck

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// quickSchemas are the schemas the quick check is tried against: every
// keyword it knows, in the combinations tools write.
var quickSchemas = []string{
	`{"type":"object","properties":{
		"a":{"type":"integer","minimum":-5,"exclusiveMaximum":10},
		"b":{"type":["string","null"],"minLength":2,"maxLength":4,"description":"two to four characters"},
		"c":{"enum":["x","yy","ü"]},
		"d":{"type":"array","items":{"type":"number","exclusiveMinimum":0.1,"maximum":1e3},"minItems":1,"maxItems":3},
		"e":{"type":"boolean"},
		"f":true,
		"g":false,
		"h":{"type":"object","additionalProperties":{"type":"string"}},
		"i":{"type":"number","minimum":-1.5e-7,"maximum":0.30000000000001}
	},"required":["a"],"additionalProperties":false}`,
	`{"additionalProperties":false,"properties":{"data":{"description":"Payload; ignored","type":"string"},"ms":{"description":"How long to sleep in milliseconds","maximum":3600000,"minimum":0,"type":"number"}},"required":["ms"],"type":"object"}`,
	`{"type":"object"}`,
	`{"type":"object","properties":{"n":{"type":["integer","string"],"maximum":0}},"additionalProperties":{"type":"array","items":{"type":"null"}}}`,
	`{"type":"object","properties":{"z":{"type":"number","minimum":0,"maximum":0},"p":{"type":"number","exclusiveMinimum":0},"t":{"type":"number","maximum":1e-300}}}`,
}

// testBounds are package windlass's bounds on numbers.
var testBounds = NumberBounds{MaxLength: 100, MaxExponent: 400}

// compileBoth compiles schema for the library and for the quick check.
func compileBoth(t testing.TB, schema string) (*jsonschema.Schema, *Schema) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schema)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("windlass:///q.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("windlass:///q.json")
	if err != nil {
		t.Fatal(err)
	}
	q, ok := Compile(doc, testBounds)
	if !ok {
		t.Fatalf("no quick check compiled for %s", schema)
	}
	return s, q
}

// FuzzQuickCheckAgrees checks the one thing the quick check must never
// do: accept arguments the JSON Schema library refuses.
func FuzzQuickCheckAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`, `{"a":-5}`, `{"a":10}`, `{"a":9.5}`, `{"a":1.0}`, `{"a":1e0}`, `{"a":-6}`,
		`{"a":0,"b":"ab"}`, `{"a":0,"b":"abcde"}`, `{"a":0,"b":"ü€"}`, `{"a":0,"b":null}`, `{"a":0,"b":1}`,
		`{"a":0,"c":"ü"}`, `{"a":0,"c":"z"}`, `{"a":0,"c":1}`, `{"a":0,"d":[0.2,1000]}`, `{"a":0,"d":[0.1]}`,
		`{"a":0,"d":[]}`, `{"a":0,"d":[1,2,3,4]}`, `{"a":0,"d":[1000.0000000000001]}`, `{"a":0,"e":true}`,
		`{"a":0,"f":{"x":[1]}}`, `{"a":0,"g":1}`, `{"a":0,"h":{"k":"v"}}`, `{"a":0,"h":{"k":1}}`, `{"a":0,"z":1}`,
		`{"a":0,"i":0.30000000000001}`, `{"a":0,"i":0.300000000000010000001}`, `{"ms":100,"data":"x"}`,
		`{"ms":3600000.0000000001}`, `{"ms":-0}`, `{"ms":1e400}`, `{"n":0}`, `{"n":"s"}`, `{"n":1}`, `{"x":[null]}`,
		`{"x":[0]}`, `{"a":0,"a":"dup"}`, `{}`, `[]`, `null`, `"s"`,
		`{"z":1e-400}`, `{"z":-1e-330}`, `{"z":4.9e-324}`, `{"z":0e-400}`, `{"z":-0.0e5}`, `{"p":1e-400}`, `{"p":1e-320}`,
		`{"t":1e-300}`, `{"t":1.0000000000001e-300}`, `{"t":2e-301}`,
		`{"a":0,"b":"a\u0062"}`, `{"a":0,"h":{"k\"":"v"}}`, `{"a":0,"b":"` + "\xff\xfe" + `"}`, `{"a":0} {}`, ` {"a":0}` + "\n",
		`{"a":0,"f":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`, // the deepest it checks
		`{"a":0,"f":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`,
	} {
		f.Add([]byte(seed))
	}
	type pair struct {
		schema string
		lib    *jsonschema.Schema
		quick  *Schema
	}
	var pairs []pair
	for _, s := range quickSchemas {
		lib, quick := compileBoth(f, s)
		pairs = append(pairs, pair{s, lib, quick})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, ok := Decode(data)
		out := ok && outOfRange(v)
		for _, p := range pairs {
			if valid, values := p.quick.SurelyValid(data); valid {
				if all, _ := Values(data, len(data)); values != all {
					t.Fatalf("quick check of %s counted %d values, Values %d", data, values, all)
				}
				if _, object := v.(map[string]any); !ok || !object || !json.Valid(data) || out {
					t.Fatalf("quick check accepted %s, which Validate refuses before any schema (decoded %v, object %v, a number out of range %v)", data, ok, object, out)
				}
				if err := p.lib.Validate(v); err != nil {
					t.Fatalf("quick check of the JSON accepted %s for schema %s; the library says %v", data, p.schema, err)
				}
			}
		}
	})
}

// TestQuickCheckAnswers pins what the quick check says, including where
// it must leave the answer to the library.
func TestQuickCheckAnswers(t *testing.T) {
	_, q := compileBoth(t, quickSchemas[0])
	for _, c := range []struct {
		args string
		want bool
	}{
		{`{"a":1}`, true},
		{`{"a":-5,"b":"abcd","c":"ü","d":[0.2,1000],"e":false,"f":[1],"h":{"k":"v"},"i":0}`, true},
		{`{"a":10}`, false},            // exclusive maximum
		{`{"a":1.0}`, false},           // an integer, but the library decides written so
		{`{"b":"ab"}`, false},          // required a missing
		{`{"a":0,"b":"abcde"}`, false}, // five characters
		{`{"a":0,"b":"ü€ü€"}`, true},   // four characters, more bytes
		{`{"a":0,"c":"z"}`, false},     // not in the enum
		{`{"a":0,"d":[0.1]}`, false},   // exclusive minimum
		{`{"a":0,"d":[1,2,3,4]}`, false},
		{`{"a":0,"g":null}`, false},                  // the false schema
		{`{"a":0,"z":1}`, false},                     // no additional properties
		{`{"a":0,"i":0.30000000000001}`, true},       // the maximum itself
		{`{"a":0,"i":0.3000000000000100001}`, false}, // just over it, in more digits than a float64 holds: the library decides
		{`{"a":0,"i":-0.00000015}`, true},
		{`{"a":0,"i":-0.000000150001}`, false},
	} {
		if got, _ := q.SurelyValid([]byte(c.args)); got != c.want {
			t.Errorf("quick check of the JSON %s = %v, want %v", c.args, got, c.want)
		}
	}
	// What the JSON itself decides.
	for args, want := range map[string]bool{
		" {\n\t\"a\" : 1 , \"b\":\"xy\" } ": true,
		`{"a":1,"b":"x\u0079"}`:             false, // an escape: the decoding path decides
		`{"a":1} x`:                         false, // trailing bytes
		`{"a":1,"a":2}`:                     false, // a required key twice: the decoder keeps the last
		`{"a":1,"h":{"k":"v","k":"w"}}`:     true,  // other duplicates are checked each time
		`{"a":01}`:                          false, // not JSON
		`{"a":1,"b":"x` + "\x01" + `y"}`:    false, // a control character
		`{"a":1,"b":"\xff\xfe"}`:            false, // not UTF-8
		`{"a":1e401}`:                       false, // out of Validate's number range
		`{"a":1,"f":[1,{"x":null},true]}`:   true,
		`{"a":1,"f":[1,}`:                   false,
		`[]`:                                false,
		`{"a":1,"i":1e-400}`:                false, // rounds to 0, inside i's bounds, yet only the library compares it
		`{"a":1,"d":[1e-400]}`:              false, // rounds to 0, under d's exclusive minimum 0.1
		`{"a":1,"f":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`:     true,
		`{"a":1,"f":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`: false, // too deep: the decoders decide
	} {
		if got, _ := q.SurelyValid([]byte(args)); got != want {
			t.Errorf("quick check of the JSON %q = %v, want %v", args, got, want)
		}
	}
}

// TestQuickCheckCompiles: schemas with keywords outside the subset get no
// quick check, so the library alone decides.
func TestQuickCheckCompiles(t *testing.T) {
	for schema, want := range map[string]bool{
		`{"type":"object","properties":{"s":{"type":"string","pattern":"^a"}}}`:                    false,
		`{"type":"object","properties":{"s":{"$ref":"#/$defs/x"}},"$defs":{"x":{}}}`:               false,
		`{"type":"object","properties":{"s":{"type":"string","format":"email"}}}`:                  false,
		`{"type":"object","properties":{"s":{"anyOf":[{"type":"string"}]}}}`:                       false,
		`{"type":"object","properties":{"n":{"type":"integer","maximum":12345678901234567}}}`:      false,
		`{"type":"object","properties":{"n":{"type":"integer","minimum":0,"exclusiveMinimum":0}}}`: false,
		`{"type":"object","properties":{"e":{"enum":["a",1]}}}`:                                    false,
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`:                    false,
		`{"type":"object","properties":{"n":{"type":"integer","maximum":12345678901234}}}`:         true,
	} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schema)))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := Compile(doc, testBounds); ok != want {
			t.Errorf("quick check compiled for %s = %v, want %v", schema, ok, want)
		}
	}
}

// outOfRange reports whether a decoded value holds a number outside
// testBounds, which Validate refuses before any schema.
func outOfRange(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return !testBounds.InRange(string(v))
	case []any:
		for _, e := range v {
			if outOfRange(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if outOfRange(e) {
				return true
			}
		}
	}
	return false
}

// TestNumberBounds checks the bounds at their edges.
func TestNumberBounds(t *testing.T) {
	for lit, want := range map[string]bool{
		strings.Repeat("9", 100): true, strings.Repeat("9", 101): false,
		"1e400": true, "1E+400": true, "-1e-400": true, "1e401": false, "1e-401": false,
		"0e99999999999999999999": false, "1.5": true, "-0": true,
	} {
		if got := testBounds.InRange(lit); got != want {
			t.Errorf("InRange(%s) = %v, want %v", lit, got, want)
		}
	}
}
