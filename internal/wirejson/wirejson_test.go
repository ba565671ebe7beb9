package wirejson_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/wirejson"
)

// wireRecords are call and result messages as the fleet and foreign
// clients write them, and as a careless or hostile one might.
var wireRecords = []string{
	`{"id":"c-1","name":"add","arguments":{"a":1,"b":2},"deadline":"2026-12-05T05:00:00.123456789Z","spec_hash":"ab","metadata":{"k":"v"},"key":"t1"}`,
	`{"id":"c-2","name":"add","arguments":null}`,
	`{"ID":"c-3","Name":"add","Arguments":{}}`,                        // names matched without case, as encoding/json does
	`{"id":"c-4","id":"c-5","name":"add","arguments":{}}`,             // a duplicate name: the last wins, as in encoding/json
	"{\"id\":\"c-6\",\"name\":\"a\xffb\",\"arguments\":{}}",           // invalid UTF-8: replaced, not refused
	`{"id":"c-7","name":"add","arguments":[1],"attempt":1.5}`,         // a fraction for an int: an error
	`{"id":"c-8","name":null,"arguments":{"x":"\u00e9\ud83d\ude00"}}`, // null leaves a field as it is
	`{"id":"c-9","name":"add","arguments":{},"deadline":"yesterday"}`, // a bad time: an error
	`{"id":"c-10","name":"add","arguments":{}`,                        // truncated: an error
	`{"call_id":"c-1","name":"add","content":"3","data":3,"is_error":false,"duration_ms":0.5,"worker":"w1","attempt":2,"started_at":"2026-12-05T05:00:00Z"}`,
	`{"call_id":"c-1","name":"add","content":"boom","is_error":true,"error":{"code":"tool_error","message":"boom","retryable":true}}`,
	`{"call_id":"c-1","name":"add","content":"","data_ref":{"object":"o","size":12,"sha256":"ff"},"content_ref":{"object":"o","size":12}}`,
	`{"id":"c-11","name":"add","arguments":{},"attempt":1e2,"deadline":null,"metadata":{"a":1},"key":"k"}`, // a type mismatch: an error, the rest still read
	`{"call_id":"c-1","is_error":"true","duration_ms":1e400,"attempt":99999999999999999999}`,               // out of range: errors
	`{"call_id":"c-1","attempt":-0,"duration_ms":-1.5e-3,"error":null,"data":null,"started_at":null}`,
	`[]`, `null`, ``, `{"call_id":7}`, ` {"id":"c-12"} `, `{"id":"c-13"} x`,
}

// TestDecodeIsEncodingJSON holds Decode to encoding/json's values, and to
// its failures, for calls and results (what a failed decode left in the
// value may differ: see Decode).
func TestDecodeIsEncodingJSON(t *testing.T) {
	for _, rec := range wireRecords {
		var wantCall, gotCall windlass.ToolCall
		wantErr, gotErr := json.Unmarshal([]byte(rec), &wantCall), wirejson.Decode([]byte(rec), &gotCall)
		if (wantErr == nil) != (gotErr == nil) || wantErr == nil && !reflect.DeepEqual(wantCall, gotCall) {
			t.Errorf("call %s:\n got %+v, %v\nwant %+v, %v", rec, gotCall, gotErr, wantCall, wantErr)
		}
		var wantResult, gotResult windlass.ToolResult
		wantErr, gotErr = json.Unmarshal([]byte(rec), &wantResult), wirejson.Decode([]byte(rec), &gotResult)
		if (wantErr == nil) != (gotErr == nil) || wantErr == nil && !reflect.DeepEqual(wantResult, gotResult) {
			t.Errorf("result %s:\n got %+v, %v\nwant %+v, %v", rec, gotResult, gotErr, wantResult, wantErr)
		}
	}
}

// FuzzDecodeIsEncodingJSON looks for a call or result message on which
// Decode and encoding/json disagree.
func FuzzDecodeIsEncodingJSON(f *testing.F) {
	for _, rec := range wireRecords {
		f.Add([]byte(rec))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, into := range []func() any{func() any { return new(windlass.ToolCall) }, func() any { return new(windlass.ToolResult) }} {
			want, got := into(), into()
			wantErr, gotErr := json.Unmarshal(data, want), wirejson.Decode(data, got)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("%q into %T: encoding/json says %v, Decode %v", data, want, wantErr, gotErr)
			}
			if wantErr == nil && !reflect.DeepEqual(want, got) {
				t.Fatalf("%q:\n got %+v\nwant %+v", data, got, want)
			}
		}
	})
}

// BenchmarkDecode compares Decode with encoding/json on the records every
// call carries: the call the worker reads, the result the dispatcher reads.
func BenchmarkDecode(b *testing.B) {
	call, _ := json.Marshal(windlass.ToolCall{ID: "01JDXKZ6Q3W4E5R6T7Y8U9I0OP", Name: "bench_noop",
		Arguments: json.RawMessage(`{"data":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`),
		Deadline:  time.Date(2026, 12, 5, 5, 0, 0, 123456789, time.UTC), SpecHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"})
	result, _ := json.Marshal(windlass.ToolResult{CallID: "01JDXKZ6Q3W4E5R6T7Y8U9I0OP", Name: "bench_noop", Content: "0",
		Data: json.RawMessage("0"), DurationMS: 0.012, Worker: "bench-worker-1", Attempt: 1, StartedAt: time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)})
	for _, c := range []struct {
		name   string
		data   []byte
		decode func([]byte, any) error
		into   func() any
	}{
		{"call/encoding-json", call, json.Unmarshal, func() any { return new(windlass.ToolCall) }},
		{"call/wirejson", call, wirejson.Decode, func() any { return new(windlass.ToolCall) }},
		{"result/encoding-json", result, json.Unmarshal, func() any { return new(windlass.ToolResult) }},
		{"result/wirejson", result, wirejson.Decode, func() any { return new(windlass.ToolResult) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.decode(c.data, c.into()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
