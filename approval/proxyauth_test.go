package approval_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass/approval"
)

// asProxy sends a request to the service as an authenticating proxy
// would: the reviewer's name in X-Forwarded-User (each of names, once
// each), a bearer token only when token is set.
func (f *fleet) asProxy(method, path, token string, body string, names ...string) (int, map[string]any) {
	f.t.Helper()
	req, _ := http.NewRequestWithContext(f.t.Context(), method, f.api.URL+path, strings.NewReader(body))
	for _, n := range names {
		req.Header.Add("X-Forwarded-User", n)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// restartWith restarts the service with edit applied to its config.
func (f *fleet) restartWith(edit func(*approval.Config)) {
	f.t.Helper()
	f.stopSvc()
	edit(&f.cfg)
	f.startService()
}

// TestReviewerFromTrustedProxy: with --identity-header X-Forwarded-User
// and --trusted-proxies, a request from a trusted proxy's address (the
// test's 127.0.0.1) is the reviewer its header names, with that
// reviewer's groups, and decides as them; a name that is no reviewer's is
// 401, a header given twice 400. With a config that does not trust
// 127.0.0.1, the same request is refused 403 untrusted_identity — even
// with a valid bearer token beside it — while a request without the header
// is still known by its token.
func TestReviewerFromTrustedProxy(t *testing.T) {
	t.Parallel()
	f := newGroupFleet(t, nil, map[string][]string{"alice": {"finance"}})
	f.restartWith(func(c *approval.Config) {
		c.IdentityHeader, c.TrustedProxies = "X-Forwarded-User", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	code, body := f.asProxy("GET", "/v1/me", "", "", "alice")
	if code != http.StatusOK || body["name"] != "alice" || len(body["groups"].([]any)) != 1 {
		t.Fatalf("GET /v1/me from the trusted proxy as alice = %d %v, want alice with her groups", code, body)
	}
	id := f.submit(payArgs{To: "x", Amount: 1})
	f.held(id)
	if code, body := f.asProxy("POST", "/v1/approvals/"+id+"/reject", "", `{"reason":"via the proxy"}`, "alice"); code != http.StatusOK || body["rejected_by"] != "alice" {
		t.Fatalf("reject from the trusted proxy as alice = %d %v, want rejected by alice", code, body)
	}
	if code, body := f.asProxy("GET", "/v1/me", "", "", "mallory"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/me as mallory, no reviewer = %d %v, want 401", code, body)
	}
	if code, body := f.asProxy("GET", "/v1/me", "", "", "alice", "bob"); code != http.StatusBadRequest {
		t.Errorf("GET /v1/me with the header twice = %d %v, want 400", code, body)
	}

	f.restartWith(func(c *approval.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	code, body = f.asProxy("GET", "/v1/me", f.tokens["bob"], "", "alice")
	if e, _ := body["error"].(map[string]any); code != http.StatusForbidden || e["code"] != "untrusted_identity" {
		t.Errorf("GET /v1/me from an untrusted address naming alice = %d %v, want 403 untrusted_identity", code, body)
	}
	if code, body := f.asProxy("GET", "/v1/me", f.tokens["bob"], ""); code != http.StatusOK || body["name"] != "bob" {
		t.Errorf("GET /v1/me with bob's token, no header = %d %v, want bob", code, body)
	}
}
