package approval_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
)

// TestRejectionGuidance: a reviewer rejects with or without "do not
// retry" (no_retry); the caller's result says that a person declined this
// exact call, who, why, and whether the model may try again with changes
// or must not; it is not retryable; the held call and its audit entry
// record no_retry.
func TestRejectionGuidance(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	tests := []struct {
		name    string
		body    map[string]any
		noRetry bool
		want    []string
	}{
		{"may retry with changes", map[string]any{"reason": "use the EUR account"}, false,
			[]string{"Rejected by carol", `Reason: "use the EUR account"`, "Do not repeat the same call unchanged", "You may try again only with changes that address the reason"}},
		{"do not retry", map[string]any{"reason": "duplicate payment", "no_retry": true}, true,
			[]string{"Rejected by carol", `Reason: "duplicate payment"`, "The reviewer said not to retry: do not make this call again, with these or other arguments"}},
	}
	for _, tt := range tests {
		id := f.submit(payArgs{To: "mallory", Amount: 7})
		f.held(id)
		code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", tt.body)
		if code != http.StatusOK || body["no_retry"] != tt.noRetry {
			t.Fatalf("%s: reject = %d %v, want 200 with no_retry %v", tt.name, code, body, tt.noRetry)
		}
		r := f.wait(id)
		if r.Code() != windlass.CodeRejected || !r.IsError || r.Error.Retryable || r.Content != r.Error.Message {
			t.Fatalf("%s: result = %+v, want a rejected error result, not retryable, its content its message", tt.name, r)
		}
		want := append([]string{`A person reviewed this exact call to "pay" and declined it; it was not run.`}, tt.want...)
		for _, w := range want {
			if !strings.Contains(r.Content, w) {
				t.Errorf("%s: the model reads %q; it does not say %q", tt.name, r.Content, w)
			}
		}
		h := f.held(id)
		if h.NoRetry != tt.noRetry || r.Content != approval.RejectedMessage(h) {
			t.Errorf("%s: held no_retry %v, content %q; want %v, RejectedMessage %q", tt.name, h.NoRetry, r.Content, tt.noRetry, approval.RejectedMessage(h))
		}
		audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{Limit: 1000})
		found := false
		for _, ev := range audit {
			if ev.CallID == id && ev.Event == "rejected" {
				found = true
				if got := ev.Fields["no_retry"] == "1"; got != tt.noRetry {
					t.Errorf("%s: audit entry %+v, want no_retry %v", tt.name, ev, tt.noRetry)
				}
			}
		}
		if !found {
			t.Errorf("%s: no rejected audit entry", tt.name)
		}
	}
	if f.runs.Load() != 0 {
		t.Errorf("rejected calls ran %d times", f.runs.Load())
	}
}

// TestExpiryGuidance: a call nobody decided in time tells the model that
// no person declined it and that a retry waits for approval again.
func TestExpiryGuidance(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {Window: 300 * time.Millisecond}})
	id := f.submit(payArgs{To: "bob", Amount: 1})
	f.held(id)
	r := f.wait(id)
	if r.Code() != windlass.CodeExpired || r.Error.Retryable {
		t.Fatalf("result = %+v, want expired, not retryable", r)
	}
	for _, w := range []string{`Nobody decided on this call to "pay" within its approval window`, "it was not run", "No person declined it",
		"you may make it again once, and it will wait for a person's approval again"} {
		if !strings.Contains(r.Content, w) {
			t.Errorf("the model reads %q; it does not say %q", r.Content, w)
		}
	}
	if h := f.held(id); r.Content != approval.ExpiredMessage(h) {
		t.Errorf("content %q, want ExpiredMessage %q", r.Content, approval.ExpiredMessage(h))
	}
}
