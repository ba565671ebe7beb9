package approval_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/receipt"
)

// TestReleasedCallHasAVerifiedReceipt: a call approved through the
// service runs with a receipt in its stored result that verifies against
// the worker's published key and names the call, the tool, the approver,
// the approved arguments' hash and the times; the service's receipt
// endpoint says so, and the audit log's released entry links to it.
func TestReleasedCallHasAVerifiedReceipt(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 7}, dispatcher.WithCallID("receipted-1"))
	h := f.held(id)
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK {
		t.Fatalf("approve = %d %v", code, body)
	}
	res := f.wait(id)
	if res.IsError {
		t.Fatalf("result = %+v", res)
	}

	// The library, on the stored result.
	m := fleettest.StoredResult(t, f.JetStream(), id)
	r, err := receipt.NewChecker(f.Registry()).Check(t.Context(), id, m.Header.Get(layout.HeaderReceipt), m.Data)
	if err != nil {
		t.Fatalf("the receipt of a released call does not verify: %v", err)
	}
	switch {
	case r.Tool != "pay" || r.CallID != id || r.Worker != res.Worker:
		t.Errorf("receipt names %s/%s/%s, want pay/%s/%s", r.Tool, r.CallID, r.Worker, id, res.Worker)
	case !slices.Equal(r.ApprovedBy, []string{"alice"}) || r.ReleaseID == "":
		t.Errorf("receipt's release: %q approved by %v, want alice's release", r.ReleaseID, r.ApprovedBy)
	case r.ArgsHash != h.ArgsHash:
		t.Errorf("receipt's args hash %s, want the approved %s", r.ArgsHash, h.ArgsHash)
	case r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) || !r.StartedAt.Equal(res.StartedAt):
		t.Errorf("receipt's times %s..%s, the result started %s", r.StartedAt, r.FinishedAt, res.StartedAt)
	case r.SpecHash == "":
		t.Error("receipt without a spec hash")
	}

	// The API: the endpoint and the audit log's link to it.
	code, body := f.do("GET", approval.ReceiptLink(id), "bob", nil)
	if code != http.StatusOK || body["verified"] != true || body["public_key"] == nil {
		t.Fatalf("GET receipt = %d %v", code, body)
	}
	if got := body["receipt"].(map[string]any)["approved_by"]; len(got.([]any)) != 1 || got.([]any)[0] != "alice" {
		t.Errorf("GET receipt: approved_by %v", got)
	}
	var link string
	fleetAudit, err := f.svc.Audit(t.Context(), approval.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range fleetAudit {
		if ev.Event == "released" && ev.CallID == id {
			link = ev.Fields["receipt"]
		}
	}
	if link != "/v1/approvals/receipted-1/receipt" {
		t.Errorf("the released audit entry links to %q", link)
	}
	code, page := f.do("GET", "/v1/audit", "bob", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/audit = %d", code)
	}
	found := false
	for _, it := range page["items"].([]any) {
		ev := it.(map[string]any)
		if ev["event"] == "released" {
			found = ev["fields"].(map[string]any)["receipt"] == link
		}
	}
	if !found {
		t.Errorf("GET /v1/audit: no released entry with the receipt link: %v", page)
	}

	// A result the call does not have yet: 404 no_result; a call never
	// held: 404.
	pending := f.submit(payArgs{To: "carol", Amount: 1})
	f.held(pending)
	if code, body := f.do("GET", approval.ReceiptLink(pending), "bob", nil); code != http.StatusNotFound || body["error"].(map[string]any)["code"] != "no_result" {
		t.Errorf("GET receipt of a held call = %d %v", code, body)
	}
	if code, _ := f.do("GET", approval.ReceiptLink("never-held"), "bob", nil); code != http.StatusNotFound {
		t.Errorf("GET receipt of an unknown call = %d", code)
	}
	if code, _ := f.do("GET", approval.ReceiptLink(id), "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET receipt without a token = %d", code)
	}
}
