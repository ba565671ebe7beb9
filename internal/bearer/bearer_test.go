package bearer_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/internal/bearer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSetLookup(t *testing.T) {
	set, err := bearer.NewSet([]bearer.Entry{{Name: "alice", SHA256: bearer.Hash("tok-a")}, {Name: "bob", SHA256: bearer.Hash("tok-b")}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, token, want string
		ok                bool
	}{
		{"First", "tok-a", "alice", true},
		{"Second", "tok-b", "bob", true},
		{"Wrong", "tok-c", "", false},
		{"Empty", "", "", false},
		{"TheHashItself", bearer.Hash("tok-a"), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := set.Lookup(tc.token)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tc.token, got, ok, tc.want, tc.ok)
			}
		})
	}
	if set.Len() != 2 {
		t.Errorf("Len = %d, want 2", set.Len())
	}
}

func TestNewSetRejectsBadHashes(t *testing.T) {
	for _, h := range []string{"", "abc", bearer.Hash("x")[:62], "zz" + bearer.Hash("x")[2:]} {
		_, err := bearer.NewSet([]bearer.Entry{{Name: "k", SHA256: h}})
		if !errors.Is(err, bearer.ErrBadHash) {
			t.Errorf("NewSet(hash %q) = %v, want ErrBadHash", h, err)
		}
	}
}

func TestFromRequest(t *testing.T) {
	cases := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer  abc ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"", "", false},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		got, ok := bearer.FromRequest(r)
		if got != tc.want || ok != tc.ok {
			t.Errorf("FromRequest(%q) = %q, %v; want %q, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}
