package mcptool

import (
	"slices"
	"strings"
	"testing"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prefix, in, want string
	}{
		{name: "valid", in: "search", want: "search"},
		{name: "dots and slashes", in: "github.search/issues", want: "github_search_issues"},
		{name: "spaces and unicode", in: "café au lait", want: "caf__au_lait"},
		{name: "prefix", prefix: "gh_", in: "search", want: "gh_search"},
		{name: "empty", in: "", want: "tool"},
		{name: "too long", in: strings.Repeat("x", 70), want: strings.Repeat("x", 64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := sanitize(tt.prefix, tt.in); got != tt.want {
				t.Errorf("sanitize(%q, %q) = %q, want %q", tt.prefix, tt.in, got, tt.want)
			}
		})
	}
}

func TestUnique(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", 64)
	tests := []struct {
		name  string
		base  string
		taken []string
		want  string
	}{
		{name: "free", base: "a", want: "a"},
		{name: "taken once", base: "a", taken: []string{"a"}, want: "a_2"},
		{name: "taken twice", base: "a", taken: []string{"a", "a_2"}, want: "a_3"},
		{name: "long name keeps 64", base: long, taken: []string{long}, want: long[:62] + "_2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := unique(tt.base, func(n string) bool { return slices.Contains(tt.taken, n) })
			if got != tt.want || len(got) > 64 {
				t.Errorf("unique(%q) = %q, want %q", tt.base, got, tt.want)
			}
		})
	}
}
