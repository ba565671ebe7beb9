package dispatcher

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

// TestEncodeCall checks that encodeCall says what json.Marshal says: both
// decode to the same call.
func TestEncodeCall(t *testing.T) {
	dl := time.Date(2026, 12, 2, 10, 0, 30, 500, time.UTC)
	tests := []struct {
		name string
		call windlass.ToolCall
	}{
		{"minimal", windlass.ToolCall{ID: "call_1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)}},
		{"empty arguments", windlass.ToolCall{ID: "call_1", Name: "add"}},
		{"spaced arguments", windlass.ToolCall{ID: "x", Name: "echo", Arguments: json.RawMessage(" {\n \"text\" : \"<b>&é\\u0000\" } \n")}},
		{"everything", windlass.ToolCall{ID: "toolu_01~!@#$%^&*()", Name: "t-1_x", Arguments: json.RawMessage(`{}`), Deadline: dl, SpecHash: "0f3c",
			Metadata: map[string]string{"requester": "ana \"<x>\"", "é": "\n"}}},
		{"a key", windlass.ToolCall{ID: "a", Name: "b", Arguments: json.RawMessage(`{}`), Key: "tenant-7@acme"}},
		{"a key that json.Marshal escapes", windlass.ToolCall{ID: "a", Name: "b", Arguments: json.RawMessage(`{}`), Key: "a<b>&c"}},
		{"a caller's odd spec hash", windlass.ToolCall{ID: "a", Name: "b", Arguments: json.RawMessage(`{}`), SpecHash: "\"<\\\x01"}},
		{"a deadline past 9999", windlass.ToolCall{ID: "a", Name: "b", Arguments: json.RawMessage(`{}`), Deadline: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"a zone", windlass.ToolCall{ID: "a", Name: "b", Arguments: json.RawMessage(`{}`), Deadline: dl.In(time.FixedZone("x", 3600))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := json.Marshal(tc.call)
			got, err := encodeCall(tc.call)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("encodeCall error %v; json.Marshal error %v", err, wantErr)
			}
			if err != nil {
				return
			}
			var a, b windlass.ToolCall
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("encodeCall wrote invalid JSON %s: %v", got, err)
			}
			if err := json.Unmarshal(want, &b); err != nil {
				t.Fatal(err)
			}
			var ga, gb any
			_ = json.Unmarshal(a.Arguments, &ga)
			_ = json.Unmarshal(b.Arguments, &gb)
			a.Arguments, b.Arguments = nil, nil
			if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(ga, gb) {
				t.Errorf("encodeCall = %s\njson.Marshal = %s", got, want)
			}
		})
	}
}
