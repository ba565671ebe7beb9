package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// TestReviewerGroupFlagsRefusedAtStart: a bad --reviewers or --policies
// entry (a group's name, an unknown option, a policy whose groups have
// too few reviewers) stops `windlass approval` and `windlass dev` with
// exit code 2 before they connect to anything (the URLs point nowhere),
// naming the entry and the rule.
func TestReviewerGroupFlagsRefusedAtStart(t *testing.T) {
	t.Setenv("WINDLASS_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("WINDLASS_REDIS_URL", "redis://127.0.0.1:1/0")
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	hash := approval.HashToken("t")
	cases := []struct {
		name string
		args []string
		want string // in the error
	}{
		{"ReviewerBadGroup", []string{"approval", "--reviewers", "alice=" + hash + ":groups=fin/ance"},
			`--reviewers entry "alice=` + hash + `:groups=fin/ance": approval: reviewer "alice": approval: group "fin/ance": a group name is 1 to 64 letters, digits, '_' or '-'`},
		{"ReviewerUnknownOption", []string{"approval", "--reviewers", "alice=" + hash + ":team=finance"},
			`approval: reviewer "alice": unknown option "team" (want name=<sha256 of the token in hex>, optionally followed by :groups=g1+g2)`},
		{"PolicyEmptyGroup", []string{"approval", "--policies", "pay:reviewers="},
			`--policies "pay:reviewers=": approval: group "": a group name is 1 to 64 letters, digits, '_' or '-'`},
		{"PolicyGroupsTwice", []string{"approval", "--policies", "pay:reviewers=a:reviewers=b"}, `--policies "pay:reviewers=a:reviewers=b": reviewers= given twice`},
		{"PolicyNoTool", []string{"approval", "--policies", ":approvals=2"}, `--policies ":approvals=2": the entry must start with a tool's name`},
		{"PolicyTwice", []string{"approval", "--policies", "pay:approvals=1,pay:approvals=2"}, `--policies "pay:approvals=2": tool "pay" has a policy already`},
		{"PolicyUnknownOption", []string{"approval", "--policies", "pay:groups=finance"}, `unknown option "groups" (use window=, approvals=, no-self, reviewers=g1+g2)`},
		{"PolicyGroupWithoutReviewers", []string{"approval", "--reviewers", "alice=" + hash + ":groups=finance", "--policies", "pay:reviewers=fianance"},
			`approval: Config.Policies["pay"].ReviewerGroups [fianance]: 0 reviewer(s) belong to them, fewer than the 1 approval(s) the tool requires`},
		{"PolicyGroupTooSmall", []string{"approval", "--reviewers", "alice=" + hash + ":groups=finance", "--policies", "pay:approvals=2:reviewers=finance"},
			`[finance]: 1 reviewer(s) belong to them, fewer than the 2 approval(s) the tool requires`},
		{"DevPolicyGroupWithoutReviewers", []string{"dev", "--policies", "pay:reviewers=finance"}, `0 reviewer(s) belong to them`},
		{"IdentityHeaderWithoutProxies", []string{"approval", "--identity-header", "X-Forwarded-User"}, "--identity-header and --trusted-proxies go together"},
		{"TrustedProxyNotAnAddress", []string{"approval", "--identity-header", "X-Forwarded-User", "--trusted-proxies", "10.0.0.0/8,proxy.local"},
			`--trusted-proxies entry "proxy.local": want an IP address or a CIDR (10.0.0.0/8)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tc.args, &stdout, &stderr)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 {
				t.Fatalf("run(%q) = %v, want an exit code 2 error", tc.args, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestApprovalsRejectNoRetry: `windlass approvals reject ID --reason R
// --no-retry` rejects "do not retry": the held call says no_retry and its
// caller's answer tells the model not to make the call again.
func TestApprovalsRejectNoRetry(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	f := fleettest.New(t)
	priv, _, _ := release.GenerateKey()
	key, _ := release.ParsePrivateKey(priv)
	token := approval.NewToken()
	svc, err := approval.New(approval.Config{Conn: f.Conn(), Redis: f.Redis.Client(t), Registry: f.Registry(), Signer: release.NewSigner(key),
		Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: approval.HashToken(token)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	api := httptest.NewServer(svc.Handler())
	defer api.Close()

	data, _ := json.Marshal(windlass.ToolCall{ID: "pay-1", Name: "pay", Arguments: json.RawMessage(`{}`)})
	if _, err := f.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: layout.ApprovalSubject("pay"), Data: data}); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "pay-1 held", func() bool {
		_, err := svc.Get(t.Context(), "pay-1")
		return err == nil
	})
	var stdout, stderr bytes.Buffer
	if err := runApprovals(t.Context(), []string{"approve", "pay-1", "--no-retry", "--approval-url", api.URL, "--token", token}, &stdout, &stderr); err == nil {
		t.Error("approvals approve --no-retry was accepted")
	}
	if err := runApprovals(t.Context(), []string{"reject", "pay-1", "--reason", "duplicate", "--no-retry", "--approval-url", api.URL, "--token", token}, &stdout, &stderr); err != nil {
		t.Fatalf("approvals reject --no-retry: %v (%s)", err, stderr.String())
	}
	h, err := svc.Get(t.Context(), "pay-1")
	if err != nil || h.Status != approval.StatusRejected || !h.NoRetry || h.Reason != "duplicate" {
		t.Fatalf("held call = %+v, %v; want rejected, no_retry, reason duplicate", h, err)
	}
	if msg := approval.RejectedMessage(h); !strings.Contains(msg, "do not make this call again") {
		t.Errorf("the caller is told %q", msg)
	}
}

// TestApprovalTokenWithGroups: `windlass approval token NAME GROUPS`
// prints a token and the --reviewers entry that puts its reviewer in
// those groups; a bad group's name is refused (exit 2), nothing minted.
func TestApprovalTokenWithGroups(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"approval", "token", "alice", "finance+ops"}, &stdout, &stderr); err != nil {
		t.Fatal(err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("printed %q; want a comment, the token, a comment, the entry", stdout.String())
	}
	tok, entry := lines[1], lines[3]
	r, err := approval.ParseReviewer(entry)
	if err != nil {
		t.Fatalf("the printed entry %q does not parse: %v", entry, err)
	}
	if r.Name != "alice" || r.TokenSHA256 != approval.HashToken(tok) || strings.Join(r.Groups, "+") != "finance+ops" {
		t.Errorf("entry %q = %+v; want alice, the token's hash, groups finance and ops", entry, r)
	}

	stdout.Reset()
	err = run(t.Context(), []string{"approval", "token", "bob", "fin/ance"}, &stdout, &stderr)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || stdout.Len() > 0 || !strings.Contains(err.Error(), `group "fin/ance"`) {
		t.Errorf("a bad group = %v, stdout %q; want exit 2 naming the group, nothing minted", err, stdout.String())
	}
}
