package windlass_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
)

func TestRender(t *testing.T) {
	t.Parallel()
	type point struct {
		X int `json:"x"`
		Y int `json:"y"`
	}
	var nilPoint *point
	tests := []struct {
		name  string
		value any
		want  string
	}{
		{name: "string passes through", value: "plain <b>text</b>", want: "plain <b>text</b>"},
		{name: "empty string", value: "", want: ""},
		{name: "nil", value: nil, want: "null"},
		{name: "typed nil", value: nilPoint, want: "null"},
		{name: "int", value: 3, want: "3"},
		{name: "float", value: 2.5, want: "2.5"},
		{name: "bool", value: true, want: "true"},
		{name: "map sorted", value: map[string]any{"b": 1, "a": 1}, want: `{"a":1,"b":1}`},
		{name: "struct", value: point{1, 2}, want: `{"x":1,"y":2}`},
		{name: "slice", value: []string{"a"}, want: `["a"]`},
		{name: "no ASCII escaping", value: map[string]string{"city": "Zürich 東京"}, want: `{"city":"Zürich 東京"}`},
		{name: "no HTML escaping", value: []string{"<a&b>"}, want: `["<a&b>"]`},
		{name: "raw JSON is its own text", value: json.RawMessage(`{"k": [1, 2]}`), want: `{"k": [1, 2]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := windlass.Render(tt.value); got != tt.want {
				t.Errorf("Render(%#v) = %q, want %q", tt.value, got, tt.want)
			}
		})
	}
}

func TestRenderUnencodableFallsBack(t *testing.T) {
	t.Parallel()
	got := windlass.Render(map[string]any{"ch": make(chan int)})
	if !strings.HasPrefix(got, "map[string]interface {}{") || !strings.Contains(got, "chan int") {
		t.Errorf("Render(unencodable) = %q, want its Go syntax", got)
	}
	got = windlass.Render(func() {})
	if !strings.Contains(got, "func()") {
		t.Errorf("Render(func) = %q", got)
	}
}
