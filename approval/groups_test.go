package approval_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/dispatcher"
)

// newGroupFleet is newFleet with reviewer groups: groups gives each
// reviewer's (a name newFleet does not have is a new reviewer with a token
// of its own), and the service runs with policies.
func newGroupFleet(t *testing.T, policies map[string]approval.ToolPolicy, groups map[string][]string) *fleet {
	t.Helper()
	f := newFleet(t, nil)
	f.stopSvc()
	for i, r := range f.cfg.Reviewers {
		f.cfg.Reviewers[i].Groups = groups[r.Name]
	}
	for name, g := range groups {
		if _, ok := f.tokens[name]; !ok {
			tok := approval.NewToken()
			f.tokens[name] = tok
			f.cfg.Reviewers = append(f.cfg.Reviewers, approval.Reviewer{Name: name, TokenSHA256: approval.HashToken(tok), Groups: g})
		}
	}
	f.cfg.Policies = policies
	f.startService()
	return f
}

// listed reports whether reviewer sees call id among the calls of status.
func (f *fleet) listed(reviewer, status, id string) bool {
	f.t.Helper()
	code, body := f.do("GET", "/v1/approvals?status="+status, reviewer, nil)
	if code != http.StatusOK {
		f.t.Fatalf("list as %s = %d %v", reviewer, code, body)
	}
	items, _ := body["items"].([]any)
	return slices.ContainsFunc(items, func(it any) bool { return it.(map[string]any)["id"] == id })
}

// audited returns the events of call id reviewer sees in the audit log.
func (f *fleet) audited(reviewer, id string) []string {
	f.t.Helper()
	code, body := f.do("GET", "/v1/audit", reviewer, nil)
	if code != http.StatusOK {
		f.t.Fatalf("audit as %s = %d %v", reviewer, code, body)
	}
	var events []string
	items, _ := body["items"].([]any)
	for _, it := range items {
		if ev := it.(map[string]any); ev["call_id"] == id {
			events = append(events, ev["event"].(string))
		}
	}
	return events
}

// TestReviewerGroups: a tool whose policy names the finance group is seen
// and decided by finance's reviewers only. bob (ops) and carol (no group)
// get 403 not_allowed on every request about the call, do not see it in
// the list or the audit log, and decide nothing; alice (finance) sees it
// with its reviewer_groups and approves it, and it runs.
func TestReviewerGroups(t *testing.T) {
	t.Parallel()
	f := newGroupFleet(t, map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{"finance"}}},
		map[string][]string{"alice": {"finance", "audit"}, "bob": {"ops"}})
	id := f.submit(payArgs{To: "bob", Amount: 20000})
	h := f.held(id)
	if !slices.Equal(h.ReviewerGroups, []string{"finance"}) {
		t.Fatalf("held call's reviewer groups = %v, want [finance]", h.ReviewerGroups)
	}

	for _, who := range []string{"bob", "carol"} {
		requests := []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/approvals/" + id, nil},
			{"GET", "/v1/approvals/" + id + "/arguments", nil},
			{"GET", "/v1/approvals/" + id + "/history", nil}, // the console's
			{"GET", "/v1/approvals/" + id + "/result", nil},
			{"GET", "/v1/approvals/" + id + "/receipt", nil},
			{"POST", "/v1/approvals/" + id + "/approve", map[string]any{"args_hash": h.ArgsHash}},
			{"POST", "/v1/approvals/" + id + "/reject", map[string]any{"reason": "not mine to decide"}},
			{"POST", "/v1/approvals/" + id + "/reject", map[string]any{"reason": "not mine to decide", "no_retry": true}},
		}
		for _, r := range requests {
			code, body := f.do(r.method, r.path, who, r.body)
			e, _ := body["error"].(map[string]any)
			if code != http.StatusForbidden || e["code"] != "not_allowed" || strings.Contains(fmt.Sprint(body), "20000") {
				t.Errorf("%s %s as %s = %d %v, want 403 not_allowed showing nothing of the call", r.method, r.path, who, code, body)
			}
		}
		if f.listed(who, "pending", id) {
			t.Errorf("%s sees the finance call in the pending list", who)
		}
		if ev := f.audited(who, id); len(ev) != 0 {
			t.Errorf("%s sees the finance call's audit entries %v", who, ev)
		}
	}
	if st := f.held(id).Status; st != approval.StatusPending || f.runs.Load() != 0 {
		t.Fatalf("after the refused requests the call is %s (runs %d), want pending, not run", st, f.runs.Load())
	}

	// Who am I: the dashboard asks.
	for who, want := range map[string]string{"alice": `{"groups":["audit","finance"],"name":"alice"}`, "carol": `{"groups":[],"name":"carol"}`} {
		code, body := f.do("GET", "/v1/me", who, nil)
		if got, _ := json.Marshal(body); code != http.StatusOK || string(got) != want {
			t.Errorf("GET /v1/me as %s = %d %s, want %s", who, code, got, want)
		}
	}

	// alice, in finance, sees the call (with who may decide it) and approves.
	if !f.listed("alice", "pending", id) {
		t.Fatal("alice (finance) does not see the finance call")
	}
	code, body := f.do("GET", "/v1/approvals/"+id, "alice", nil)
	if groups, _ := body["reviewer_groups"].([]any); code != http.StatusOK || len(groups) != 1 || groups[0] != "finance" {
		t.Fatalf("GET as alice = %d %v, want the call with reviewer_groups [finance]", code, body)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK || body["status"] != "approved" {
		t.Fatalf("approve as alice = %d %v", code, body)
	}
	if r := f.wait(id); r.IsError || f.runs.Load() != 1 {
		t.Fatalf("result = %+v (runs %d)", r, f.runs.Load())
	}
	if ev := f.audited("alice", id); !slices.Equal(ev, []string{"requested", "approved", "released"}) {
		t.Errorf("alice's audit of the call = %v, want requested approved released", ev)
	}
	// Decided, it stays out of bob's lists.
	if f.listed("bob", "approved", id) {
		t.Error("bob sees the finance call among the approved")
	}
	// The Go API refuses him too.
	if _, err := f.svc.Reject(t.Context(), id, "bob", "late"); !errors.Is(err, approval.ErrNotAllowed) {
		t.Errorf("Reject as bob = %v, want ErrNotAllowed", err)
	}
}

// TestReviewerGroupsTwoPerson: two approvals from finance, not the
// requester's own: dave (ops) cannot count as one, alice (the requester)
// may not approve her own call, bob and carol (finance) release it.
func TestReviewerGroupsTwoPerson(t *testing.T) {
	t.Parallel()
	f := newGroupFleet(t, map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{"finance"}, RequiredApprovals: 2, ForbidSelfApproval: true}},
		map[string][]string{"alice": {"finance"}, "bob": {"finance"}, "carol": {"finance"}, "dave": {"ops"}})
	id := f.submit(payArgs{To: "x", Amount: 1}, dispatcher.WithMetadata(map[string]string{"requester": "alice"}))
	h := f.held(id)
	approve := func(who string) (int, map[string]any) {
		return f.do("POST", "/v1/approvals/"+id+"/approve", who, map[string]any{"args_hash": h.ArgsHash})
	}
	if code, body := approve("dave"); code != http.StatusForbidden || body["error"].(map[string]any)["code"] != "not_allowed" {
		t.Errorf("dave (ops) approves = %d %v, want 403 not_allowed", code, body)
	}
	if code, body := approve("alice"); code != http.StatusForbidden || body["error"].(map[string]any)["code"] != "self_approval" {
		t.Errorf("alice approves her own call = %d %v, want 403 self_approval", code, body)
	}
	if code, body := approve("bob"); code != http.StatusOK || body["status"] != "pending" {
		t.Errorf("bob, first of two = %d %v", code, body)
	}
	if code, _ := approve("dave"); code != http.StatusForbidden {
		t.Errorf("dave as the second approver = %d, want 403", code)
	}
	if got := f.held(id); got.Status != approval.StatusPending || !slices.Equal(got.Approvers, []string{"bob"}) {
		t.Fatalf("after bob and dave: %s, approvers %v; want pending, [bob]", got.Status, got.Approvers)
	}
	if code, body := approve("carol"); code != http.StatusOK || body["status"] != "approved" {
		t.Fatalf("carol, second of two = %d %v", code, body)
	}
	if r := f.wait(id); r.IsError || f.runs.Load() != 1 {
		t.Errorf("result = %+v (runs %d)", r, f.runs.Load())
	}
}

// TestReviewerGroupsLeaveOtherToolsOpen: a policy with groups for another
// tool changes nothing for pay: a reviewer of no group sees and decides it.
func TestReviewerGroupsLeaveOtherToolsOpen(t *testing.T) {
	t.Parallel()
	f := newGroupFleet(t, map[string]approval.ToolPolicy{"transfer": {ReviewerGroups: []string{"finance"}}},
		map[string][]string{"alice": {"finance"}})
	id := f.submit(payArgs{To: "x", Amount: 1})
	h := f.held(id)
	if len(h.ReviewerGroups) != 0 || !f.listed("carol", "pending", id) {
		t.Fatalf("pay (no groups): reviewer groups %v, listed for carol %v; want none, listed", h.ReviewerGroups, f.listed("carol", "pending", id))
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": "no"}); code != http.StatusOK || body["status"] != "rejected" {
		t.Fatalf("carol rejects = %d %v", code, body)
	}
	if r := f.wait(id); r.Code() != windlass.CodeRejected {
		t.Errorf("result = %+v", r)
	}
}

// TestReviewerGroupsConfig: New refuses a group of a bad name, on a
// reviewer or in a policy, and a policy whose groups have fewer members
// than the approvals it requires, naming the field and the rule.
func TestReviewerGroupsConfig(t *testing.T) {
	t.Parallel()
	hash := approval.HashToken("t")
	tests := []struct {
		name string
		cfg  approval.Config
		want string
	}{
		{"bad reviewer group", approval.Config{Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: hash, Groups: []string{"fin ance"}}}},
			`approval: Config.Reviewers[0] (alice).Groups: approval: group "fin ance": a group name is 1 to 64 letters, digits, '_' or '-' (character ' ' at byte 3 is not)`},
		{"bad policy group", approval.Config{Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: hash}},
			Policies: map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{""}}}},
			`approval: Config.Policies["pay"].ReviewerGroups: approval: group "": a group name is 1 to 64 letters, digits, '_' or '-' (got 0 characters)`},
		{"no member", approval.Config{Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: hash, Groups: []string{"finance"}}},
			Policies: map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{"fianance"}}}},
			`approval: Config.Policies["pay"].ReviewerGroups [fianance]: 0 reviewer(s) belong to them, fewer than the 1 approval(s) the tool requires; nobody could approve its calls (check the groups' names and Config.Reviewers' Groups)`},
		{"too few members", approval.Config{Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: hash, Groups: []string{"finance"}}},
			Policies: map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{"finance"}, RequiredApprovals: 2}}},
			`approval: Config.Policies["pay"].ReviewerGroups [finance]: 1 reviewer(s) belong to them, fewer than the 2 approval(s) the tool requires; nobody could approve its calls (check the groups' names and Config.Reviewers' Groups)`},
		{"enough", approval.Config{Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: hash, Groups: []string{"finance"}}},
			Policies: map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{"finance", "ops"}}}}, ""},
	}
	for _, tt := range tests {
		err := tt.cfg.ValidateReviewers()
		if got := errString(err); got != tt.want {
			t.Errorf("%s: ValidateReviewers() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestParseReviewerGroups: the --reviewers entry form, old and new.
func TestParseReviewerGroups(t *testing.T) {
	t.Parallel()
	hash := approval.HashToken("t")
	tests := []struct {
		in      string
		want    approval.Reviewer
		wantErr string
	}{
		{"alice=" + hash, approval.Reviewer{Name: "alice", TokenSHA256: hash}, ""},
		{"alice=" + hash + ":groups=finance+ops", approval.Reviewer{Name: "alice", TokenSHA256: hash, Groups: []string{"finance", "ops"}}, ""},
		{"alice=" + hash + ":groups=", approval.Reviewer{}, `approval: reviewer "alice": approval: group "": a group name is 1 to 64 letters, digits, '_' or '-' (got 0 characters)`},
		{"alice=" + hash + ":groups=fin/ance", approval.Reviewer{}, `approval: reviewer "alice": approval: group "fin/ance": a group name is 1 to 64 letters, digits, '_' or '-' (character '/' at byte 3 is not)`},
		{"alice=" + hash + ":team=finance", approval.Reviewer{}, `approval: reviewer "alice": unknown option "team" (want name=<sha256 of the token in hex>, optionally followed by :groups=g1+g2)`},
		{"alice=" + hash + ":groups=a:groups=b", approval.Reviewer{}, `approval: reviewer "alice": groups= given twice`},
	}
	for _, tt := range tests {
		got, err := approval.ParseReviewer(tt.in)
		if errString(err) != tt.wantErr || (err == nil && (got.Name != tt.want.Name || got.TokenSHA256 != tt.want.TokenSHA256 || !slices.Equal(got.Groups, tt.want.Groups))) {
			t.Errorf("ParseReviewer(%q) = %+v, %q; want %+v, %q", tt.in, got, errString(err), tt.want, tt.wantErr)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
