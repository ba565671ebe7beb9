// Package wirejson decodes the fleet's wire records, a call message and a
// result, where the fleet reads them: on the paths every call takes (the
// worker's intake of a call, the dispatcher's receipt of its result), and
// in the worker's look-up of a stored result and the approval service's
// intake and store of a held call, so that all read them alike. A Func
// tool decodes its arguments into its input type with it too: 0.6 µs and 2
// allocations a call of 128 bytes of arguments instead of 1.5 µs and 7
// (BenchmarkFuncCall, validation included).
//
// It is encoding/json's behaviour (the same field matching, null handling,
// duplicate names, invalid UTF-8 and errors' meaning) from the
// implementation that Go's encoding/json adopts under GOEXPERIMENT=jsonv2
// and by default from Go 1.27: github.com/go-json-experiment/json/v1,
// encoding/json's semantics on the v2 decoder. It decodes a call in 0.4
// and a result in 0.5 of encoding/json's time, with 2 allocations instead
// of 10 and 9 (BenchmarkDecode; BENCHMARKS.md, "The wire records read by
// encoding/json's next decoder"). When the project moves to Go 1.27, whose
// encoding/json is this decoder, the package goes.
package wirejson

import jsonv1 "github.com/go-json-experiment/json/v1"

// Decode unmarshals the JSON record data into v, as encoding/json's
// Unmarshal does: the same value when it succeeds, and an error whenever
// encoding/json's is one. What a failed decode leaves in v may differ
// (encoding/json leaves a number out of its field's range at zero, this
// decoder at the range's bound), so a caller reads v only on success, or
// only for fields it can check.
func Decode(data []byte, v any) error { return jsonv1.Unmarshal(data, v) }
