package worker

import (
	"encoding/json"
	"testing"

	"github.com/windlass-dev/windlass"
)

// TestAReceiptDoesNotHashArgumentsOverTheBound: a receipt's arguments
// hash is computed within the tool's bound on argument values — arguments
// over it, refused for their values, are not decoded to make their
// canonical form (here the escape makes the hash decode them) — and
// names no hash; within it, the hash is there. (A review helper measured
// 63 MiB and 482,022 allocations for the receipt of one 960 KB call.)
func TestAReceiptDoesNotHashArgumentsOverTheBound(t *testing.T) {
	args := json.RawMessage(`{"s":"a\nb","xs":[1,2,3]}`) // 6 values
	for _, tc := range []struct {
		bound    int
		wantHash bool
	}{{5, false}, {6, true}} {
		d := &delivery{t: &registered{spec: windlass.Spec{Name: "t", MaxArgumentValues: tc.bound}}, call: windlass.ToolCall{ID: "c", Name: "t", Arguments: args}}
		if got := argsHashOf(d); (got != "") != tc.wantHash {
			t.Errorf("bound %d: hash %q; want one: %v", tc.bound, got, tc.wantHash)
		}
	}
}
