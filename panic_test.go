package windlass_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/windlass-dev/windlass"
)

// TestPanicIsReturnedNotLogged makes tools panic (in the tool, and in the
// decoding of its arguments) and finds the panic's value and stack in the
// result, for the caller to log, and nothing in the global logger: library
// code logs only through a logger it is given. Not parallel: it replaces
// the global logger.
func TestPanicIsReturnedNotLogged(t *testing.T) {
	global := &messages{}
	prev := slog.Default()
	slog.SetDefault(slog.New(global))
	t.Cleanup(func() { slog.SetDefault(prev) })

	boom := windlass.MustFunc("boom", func(context.Context, struct{}) (int, error) { panic("boom") })
	decoding := windlass.MustFunc("decoding", func(context.Context, struct {
		P panicDecoder `json:"p,omitzero"`
	}) (int, error) {
		return 0, nil
	})
	tests := []struct {
		name string
		tool windlass.Tool
		args string
		want string // the panic's value
	}{
		{"the tool panics", boom, `{}`, "boom"},
		{"the decoder panics", decoding, `{"p":{}}`, "bad decoder"},
	}
	for _, tt := range tests {
		r := windlass.Invoke(t.Context(), tt.tool, windlass.ToolCall{ID: "p1", Arguments: json.RawMessage(tt.args)})
		p := r.Panic()
		if r.Code() != windlass.CodePanic || p == nil || p.Value != tt.want || !strings.Contains(string(p.Stack), "_test.go:") {
			t.Errorf("%s: result %+v, Panic() = %+v; want a panic result carrying %q and the stack of the panic", tt.name, r, p, tt.want)
		}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var decoded windlass.ToolResult
		if err := json.Unmarshal(data, &decoded); err != nil || decoded.Panic() != nil || strings.Contains(string(data), "_test.go:") {
			t.Errorf("%s: decoded %s: Panic() = %v, %v; want nil: the stack does not travel", tt.name, data, decoded.Panic(), err)
		}
	}
	if r := windlass.ResultFromError(windlass.ToolCall{Name: "x"}, errors.New("plain")); r.Panic() != nil {
		t.Errorf("an error result: Panic() = %v, want nil", r.Panic())
	}
	if r := windlass.ResultFromError(windlass.ToolCall{Name: "x"}, &windlass.PanicError{Value: 7}); r.Panic() == nil || r.Panic().Value != 7 {
		t.Errorf("ResultFromError of a PanicError: Panic() = %v, want it", r.Panic())
	}
	if got := global.all(); len(got) > 0 {
		t.Errorf("the global logger received %q; library code must not log there", got)
	}
}

// messages is a slog.Handler that keeps the messages it receives.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, r.Message)
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }
func (m *messages) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.msgs...)
}
