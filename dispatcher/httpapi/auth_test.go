package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestAPIKeys configures two keys by hash: a request needs one of them;
// the probes and the OpenAPI document need none.
func TestAPIKeys(t *testing.T) {
	alice, bob := httpapi.NewAPIKey(), httpapi.NewAPIKey()
	hashed, err := httpapi.ParseAPIKey("backend=" + httpapi.HashAPIKey(alice))
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, httpapi.Config{APIKeys: []httpapi.APIKey{hashed, {SHA256: httpapi.HashAPIKey(bob)}}})
	cases := []struct {
		name, key, path string
		status          int
	}{
		{"NoKey", "", "/v1/tools", 401},
		{"WrongKey", "wlk_wrong", "/v1/tools", 401},
		{"TheHashIsNoKey", httpapi.HashAPIKey(alice), "/v1/tools", 401},
		{"FirstKey", alice, "/v1/tools", 200},
		{"SecondKey", bob, "/v1/tools", 200},
		{"CallNeedsKey", "", "/v1/calls/call_x", 401},
		{"EventsNeedKey", "", "/v1/calls/call_x/events", 401},
		{"HealthzOpen", "", "/healthz", 200},
		{"ReadyzOpen", "", "/readyz", 200},
		{"OpenAPIOpen", "", "/v1/openapi.json", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.key = tc.key
			r := f.do("GET", tc.path, "")
			if r.status != tc.status {
				t.Fatalf("got %s, want %d", r, tc.status)
			}
			if tc.status == 401 && (r.errorCode() != httpapi.CodeUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer")) {
				t.Errorf("401 without an unauthorized JSON error and a Bearer challenge: %s %v", r, r.header)
			}
		})
	}
	f.key = ""
	if r := f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":1}}`); r.status != http.StatusUnauthorized {
		t.Errorf("POST without a key: %s", r)
	}
	f.key = alice
	if c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":1}}`), http.StatusOK); c.Result.Content != "2" {
		t.Errorf("POST with a key: %+v", c.Result)
	}
}

func TestParseAPIKey(t *testing.T) {
	hash := httpapi.HashAPIKey("k")
	cases := []struct {
		in, name string
		wantErr  bool
	}{
		{hash, "", false},
		{" ci=" + hash + " ", "ci", false},
		{"=" + hash, "", true},
		{"wlk_thekeyitself", "", true},
		{"ci=" + hash[:10], "", true},
	}
	for _, tc := range cases {
		k, err := httpapi.ParseAPIKey(tc.in)
		if (err != nil) != tc.wantErr || !tc.wantErr && (k.Name != tc.name || k.SHA256 != hash) {
			t.Errorf("ParseAPIKey(%q) = %+v, %v", tc.in, k, err)
		}
		if err != nil && strings.Contains(err.Error(), "thekeyitself") {
			t.Errorf("the error repeats a secret: %v", err)
		}
	}
}
