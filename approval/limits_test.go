package approval_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
)

// TestRejectionReasonIsBoundedAndReachesTheCaller: a reason over
// approval.MaxReason is refused (400, naming the field and the bound) and
// decides nothing; one at the bound is quoted in the caller's answer,
// which arrives. (A 600 KiB reason used to make an answer over the max
// payload, whose publish failed and was only logged: the caller was never
// told, and saw timeout.)
func TestRejectionReasonIsBoundedAndReachesTheCaller(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "mallory", Amount: 1})
	f.held(id)
	code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": strings.Repeat("r", 600<<10)})
	if msg, _ := body["error"].(map[string]any)["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "reason: at most 4096 bytes") {
		t.Errorf("a 600 KiB reason = %d %v, want 400 naming the field and the bound", code, body)
	}
	if h := f.held(id); h.Status != approval.StatusPending {
		t.Fatalf("the refused rejection decided the call: %s", h.Status)
	}
	reason := strings.Repeat("é", approval.MaxReason/2)
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": reason}); code != http.StatusOK {
		t.Fatalf("a reason at the bound = %d %v", code, body)
	}
	if r := f.wait(id); r.Code() != windlass.CodeRejected || !strings.Contains(r.Content, reason) {
		t.Errorf("the caller's answer: %.200v, want rejected quoting the reason", r)
	}
}

// TestGatedCallsLeaveRoomForTheirRelease: a gated call too large to be
// released inline (its release adds a header) travels by reference and is
// held; a reviewer cannot edit a held call's arguments past what can be
// released (an edit travels inline: 413, nothing decided); approved, the
// call runs once, and its large result reaches the caller. (A gated call
// accepted just under the max payload used to be approved, never
// published, never answered.)
func TestGatedCallsLeaveRoomForTheirRelease(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	limit := int(f.Conn().MaxPayload())
	tight := f.submit(payArgs{To: strings.Repeat("b", limit-600), Amount: 1})
	if h := f.held(tight); h.ArgumentsRef == nil || h.Arguments != nil {
		t.Errorf("a gated call that fits the max payload but not with its release: held with %d argument bytes and reference %v, want it by reference", len(h.Arguments), h.ArgumentsRef)
	}

	id := f.submit(payArgs{To: strings.Repeat("b", limit-6000), Amount: 1})
	h := f.held(id)
	grown := map[string]any{"to": strings.Repeat("b", limit-1000), "amount": 1}
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash, "arguments": grown})
	if msg, _ := body["error"].(map[string]any)["message"].(string); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "max payload") {
		t.Errorf("editing the arguments past what can be released = %d %v, want 413", code, body)
	}
	if h := f.held(id); h.Status != approval.StatusPending || len(h.Approvers) != 0 {
		t.Fatalf("the refused edit decided the call: %+v", h)
	}
	f.approve(id)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	want := fmt.Sprintf("paid 1.00 to %s", strings.Repeat("b", limit-6000))
	if r, err := f.d.Wait(ctx, id); err != nil || r.Content != want || f.runs.Load() != 1 {
		t.Errorf("the call that fits: %.200q, %v (runs %d), want it run once and its result whole", r.Content, err, f.runs.Load())
	}
}
