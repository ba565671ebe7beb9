package approval_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// wireTool is a gated tool marked destructive, with a description: what
// the console shows and asks a confirmation for.
func wireTool(runs *atomic.Int64) windlass.Tool {
	return windlass.MustFunc("wire", func(_ context.Context, in payArgs) (string, error) {
		runs.Add(1)
		return fmt.Sprintf("wired %.2f to %s", in.Amount, in.To), nil
	}, windlass.WithApproval(), windlass.WithDescription("Wire money to an outside bank account; it cannot be recalled."),
		windlass.WithHints(windlass.ToolHints{Destructive: new(true), Idempotent: new(false), OpenWorld: new(true)}))
}

// TestConsoleEndpointsNeedAReviewer: the console's endpoints answer 401
// without a reviewer token or with a wrong one, like the rest of the API.
func TestConsoleEndpointsNeedAReviewer(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 1})
	f.held(id)
	for _, who := range []string{"", "wlr_not-a-token"} {
		for _, path := range []string{"/v1/approvals/" + id + "/history", "/v1/approvals/" + id + "/result", "/v1/tools/pay"} {
			if code, body := f.do("GET", path, who, nil); code != http.StatusUnauthorized {
				t.Errorf("GET %s as %q = %d %v, want 401", path, who, code, body)
			}
		}
	}
}

// TestConsoleUnknownCallAndTool: 404 for a call the service does not hold
// and a tool never advertised; 400 for a name that cannot be a tool's.
func TestConsoleUnknownCallAndTool(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	for _, c := range []struct {
		path     string
		wantCode int
		wantErr  string
	}{
		{"/v1/approvals/nope/history", http.StatusNotFound, "not_found"},
		{"/v1/approvals/nope/result", http.StatusNotFound, "not_found"},
		{"/v1/tools/nope", http.StatusNotFound, "not_found"},
		{"/v1/tools/bad%20name", http.StatusBadRequest, "bad_request"},
	} {
		code, body := f.do("GET", c.path, "alice", nil)
		e, _ := body["error"].(map[string]any)
		if code != c.wantCode || e["code"] != c.wantErr {
			t.Errorf("GET %s = %d %v, want %d %s", c.path, code, body, c.wantCode, c.wantErr)
		}
	}
}

// TestConsoleToolSpec: GET /v1/tools/{name} answers the tool's spec with
// its description and hints, and the hash a held call's spec_hash is.
func TestConsoleToolSpec(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil, wireTool(new(atomic.Int64)))
	id, err := f.d.Submit(t.Context(), "wire", payArgs{To: "bob", Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := f.held(id)
	code, body := f.do("GET", "/v1/tools/wire", "alice", nil)
	spec, _ := body["spec"].(map[string]any)
	hints, _ := spec["hints"].(map[string]any)
	if code != http.StatusOK || spec["description"] != "Wire money to an outside bank account; it cannot be recalled." ||
		spec["requires_approval"] != true || hints["destructive"] != true || hints["open_world"] != true || hints["idempotent"] != false {
		t.Fatalf("GET /v1/tools/wire = %d %v", code, body)
	}
	if body["spec_hash"] != h.SpecHash || h.SpecHash == "" {
		t.Errorf("spec_hash = %v, want the held call's %q", body["spec_hash"], h.SpecHash)
	}
}

// TestConsoleHistoryAndResult: a call's history is its own audit entries,
// in order (another call's are not in it), and its result is null while
// it is pending, then the tool's result once it ran; a rejected call's
// result is its rejection.
func TestConsoleHistoryAndResult(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 5}, dispatcher.WithMetadata(map[string]string{"requester": "agent-1"}))
	other := f.submit(payArgs{To: "carol", Amount: 1})
	h := f.held(id)
	f.held(other)

	code, body := f.do("GET", "/v1/approvals/"+id+"/result", "alice", nil)
	if code != http.StatusOK || body["result"] != nil || body["status"] != "pending" || body["released"] != false {
		t.Fatalf("result while pending = %d %v", code, body)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash, "arguments": map[string]any{"to": "bob", "amount": 4}}); code != http.StatusOK {
		t.Fatalf("approve with an edit = %d %v", code, body)
	}
	if code, body := f.do("POST", "/v1/approvals/"+other+"/reject", "bob", map[string]any{"reason": "duplicate"}); code != http.StatusOK {
		t.Fatalf("reject = %d %v", code, body)
	}
	if r := f.wait(id); r.Content != "paid 4.00 to bob" {
		t.Fatalf("result = %+v", r)
	}

	code, body = f.do("GET", "/v1/approvals/"+id+"/history", "carol", nil)
	items, _ := body["items"].([]any)
	var got []string
	for _, it := range items {
		ev := it.(map[string]any)
		if ev["call_id"] != id {
			t.Errorf("an entry of another call: %v", ev)
		}
		got = append(got, fmt.Sprint(ev["event"], ":", ev["actor"]))
		if ev["event"] == "edited" {
			fields, _ := ev["fields"].(map[string]any)
			if fields["before"] != `{"to":"bob","amount":5}` || fields["after"] != `{"amount":4,"to":"bob"}` {
				t.Errorf("edited entry = %v", ev)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["time"])); err != nil {
			t.Errorf("entry time %v: %v", ev["time"], err)
		}
	}
	if want := "requested:agent-1 edited:alice approved:alice released:system"; code != http.StatusOK || strings.Join(got, " ") != want || body["truncated"] != false {
		t.Errorf("history = %d %q (%v), want %q", code, strings.Join(got, " "), body, want)
	}

	// The result, once the run's result is stored (a moment after Wait).
	var res map[string]any
	fleettest.WaitFor(t, 5*time.Second, "the stored result", func() bool {
		code, body = f.do("GET", "/v1/approvals/"+id+"/result", "carol", nil)
		res, _ = body["result"].(map[string]any)
		return code == http.StatusOK && res != nil
	})
	if res["content"] != "paid 4.00 to bob" || res["call_id"] != id || body["released"] != true || body["status"] != "approved" || body["stored_at"] == nil {
		t.Errorf("result = %v", body)
	}
	fleettest.WaitFor(t, 5*time.Second, "the rejection's result", func() bool {
		code, body = f.do("GET", "/v1/approvals/"+other+"/result", "carol", nil)
		res, _ = body["result"].(map[string]any)
		return code == http.StatusOK && res != nil
	})
	if e, _ := res["error"].(map[string]any); res["is_error"] != true || e["code"] != string(windlass.CodeRejected) || !strings.Contains(fmt.Sprint(res["content"]), "duplicate") {
		t.Errorf("result of the rejected call = %v", body)
	}
}
