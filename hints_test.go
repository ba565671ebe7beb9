package windlass_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
)

func TestSpecHints(t *testing.T) {
	t.Parallel()
	plain := windlass.Spec{Name: "x", Description: "d"}
	tests := []struct {
		name     string
		hints    *windlass.ToolHints
		wantJSON string // substring of the spec's JSON; "" means no hints key
		sameHash bool   // the hash equals the plain spec's
	}{
		{name: "nil", hints: nil, sameHash: true},
		{name: "all unset", hints: &windlass.ToolHints{}, sameHash: true},
		{name: "read-only", hints: &windlass.ToolHints{ReadOnly: new(true)}, wantJSON: `"hints":{"read_only":true}`},
		{name: "all four", hints: &windlass.ToolHints{ReadOnly: new(false), Destructive: new(false), Idempotent: new(true), OpenWorld: new(false)},
			wantJSON: `"hints":{"read_only":false,"destructive":false,"idempotent":true,"open_world":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := plain
			s.Hints = tt.hints
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantJSON == "" && strings.Contains(string(b), "hints") || tt.wantJSON != "" && !strings.Contains(string(b), tt.wantJSON) {
				t.Errorf("json = %s, want %q", b, tt.wantJSON)
			}
			if (s.Hash() == plain.Hash()) != tt.sameHash {
				t.Errorf("hash %s vs plain %s, want same=%v", s.Hash(), plain.Hash(), tt.sameHash)
			}
			var back windlass.Spec
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Hash() != s.Hash() {
				t.Errorf("hash changed across a JSON round trip: %s vs %s", back.Hash(), s.Hash())
			}
		})
	}
}

func TestWithHints(t *testing.T) {
	t.Parallel()
	tool := windlass.MustFunc("lookup", func(ctx context.Context, in struct{}) (string, error) { return "", nil },
		windlass.WithHints(windlass.ToolHints{ReadOnly: new(true), OpenWorld: new(false)}))
	h := tool.Spec().Hints
	if h == nil || h.ReadOnly == nil || !*h.ReadOnly || h.OpenWorld == nil || *h.OpenWorld || h.Destructive != nil || h.Idempotent != nil {
		t.Fatalf("hints = %+v", h)
	}
	if windlass.MustFunc("none", func(ctx context.Context, in struct{}) (string, error) { return "", nil }, windlass.WithHints(windlass.ToolHints{})).Spec().Hints != nil {
		t.Error("WithHints of no hint set hints")
	}
}
