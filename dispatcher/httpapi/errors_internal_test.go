package httpapi

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

// TestRetryAfterHeader: a refusal's own retry-after (RetryAfterMS) is the
// Retry-After header in whole seconds, rounded up, at least 1; without
// one, the code's fixed advice, if any.
func TestRetryAfterHeader(t *testing.T) {
	for _, tc := range []struct {
		ce         windlass.CallError
		status     int
		retryAfter string
	}{
		{windlass.CallError{Code: windlass.CodeOverloaded, RetryAfterMS: 1000}, 429, "1"},
		{windlass.CallError{Code: windlass.CodeOverloaded, RetryAfterMS: 1}, 429, "1"},
		{windlass.CallError{Code: windlass.CodeRateLimited, RetryAfterMS: 1001}, 429, "2"},
		{windlass.CallError{Code: windlass.CodeRateLimited, RetryAfterMS: 2500}, 429, "3"},
		{windlass.CallError{Code: windlass.CodeRateLimited}, 429, ""},
		{windlass.CallError{Code: windlass.CodeUnavailable}, 503, "2"},
		{windlass.CallError{Code: windlass.CodeInvalidCall}, 400, ""},
	} {
		w := httptest.NewRecorder()
		writeCallError(w, tc.ce)
		if w.Code != tc.status || w.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%s after %dms: %d, Retry-After %q; want %d, %q", tc.ce.Code, tc.ce.RetryAfterMS, w.Code, w.Header().Get("Retry-After"), tc.status, tc.retryAfter)
		}
	}
	if got := retryAfterSeconds(0); got != 1 {
		t.Errorf("retryAfterSeconds(0) = %d; want 1", got)
	}
	if got := retryAfterSeconds(90 * time.Second); got != 90 {
		t.Errorf("retryAfterSeconds(90s) = %d; want 90", got)
	}
}
