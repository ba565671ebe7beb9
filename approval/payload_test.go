package approval_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
)

// TestLargeArgumentsHeldByReference: a gated call whose arguments travel
// by reference (2 MiB, over the inline limit) is held with the reference,
// its SHA-256 and a preview — not a copy of the arguments; the approval
// binds the hash of the whole arguments; a reviewer can fetch them whole;
// once approved, the tool runs once with all of them.
func TestLargeArgumentsHeldByReference(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	args := payArgs{To: "bob", Amount: 5, Memo: strings.Repeat("m", 2<<20)}
	full, _ := json.Marshal(args)
	results := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "pay", args, dispatcher.WithCallID("pay-big"))
		results <- r
	}()
	h := f.held("pay-big")
	want, _ := release.ArgumentsHash(full)
	if h.Arguments != nil || h.ArgumentsRef == nil || h.ArgumentsRef.Size != int64(len(full)) || h.ArgsHash != want ||
		!strings.HasPrefix(h.ArgumentsPreview, `{"to":"bob","amount":5,"memo":"mmm`) || len(h.ArgumentsPreview) > 4<<10 {
		t.Fatalf("held: %d argument bytes, reference %+v, hash %s (want %s), preview of %d bytes", len(h.Arguments), h.ArgumentsRef, h.ArgsHash, want, len(h.ArgumentsPreview))
	}
	var kept int
	fields, err := f.Redis.Client(t).HGetAll(t.Context(), approval.DefaultPrefix+"call:{pay-big}").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range fields {
		kept += len(v)
	}
	if kept > 64<<10 {
		t.Errorf("the held call takes %d bytes in Redis: a copy of the arguments", kept)
	}

	req, _ := http.NewRequest("GET", f.api.URL+"/v1/approvals/pay-big/arguments", nil)
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != string(full) {
		t.Errorf("GET arguments = %d, %d bytes; want 200 and the %d bytes sent", resp.StatusCode, len(body), len(full))
	}
	if code, _ := f.do("GET", "/v1/approvals/pay-big/arguments", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET arguments without a token = %d; want 401", code)
	}

	code, out := f.do("POST", "/v1/approvals/pay-big/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	if code != http.StatusOK || out["released"] != true {
		t.Fatalf("approve = %d %v", code, out)
	}
	r := <-results
	if r.IsError || r.Content != "paid 5.00 to bob (a memo of 2097152 bytes)" || f.runs.Load() != 1 {
		t.Fatalf("result = %q (runs %d)", r.Content, f.runs.Load())
	}
}
