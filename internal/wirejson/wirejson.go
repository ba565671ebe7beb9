// Package wirejson decodes the fleet's wire records — a call message, a
// result — on the paths every call takes: the worker's intake of a call and
// the dispatcher's receipt of its result.
//
// It is encoding/json's behaviour (the same field matching, null handling,
// duplicate names, invalid UTF-8 and errors' meaning) from the
// implementation that Go's encoding/json adopts under GOEXPERIMENT=jsonv2
// and by default from Go 1.27: github.com/go-json-experiment/json/v1,
// encoding/json's semantics on the v2 decoder. It decodes a call or a
// result in about a third of the time, with 2 allocations instead of 9 or
// 10 (BenchmarkDecode; BENCHMARKS.md, "Where the time goes"). When the
// project moves to Go 1.27 this package is encoding/json again, and goes.
package wirejson

import jsonv1 "github.com/go-json-experiment/json/v1"

// Decode unmarshals the JSON record data into v, as encoding/json's
// Unmarshal does.
func Decode(data []byte, v any) error { return jsonv1.Unmarshal(data, v) }
