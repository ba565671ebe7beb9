package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// TestApprovalsAuditPrintsJSONLines: `approvals audit --since T` prints the
// audit entries written at or after T, one JSON object a line with the
// documented fields; --since with a duration reaches back that long.
func TestApprovalsAuditPrintsJSONLines(t *testing.T) {
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

	var audit []approval.AuditEvent
	for i := range 3 {
		id := fmt.Sprintf("call-%d", i)
		data, _ := json.Marshal(windlass.ToolCall{ID: id, Name: "pay", Arguments: json.RawMessage(`{}`)})
		if _, err := f.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: layout.ApprovalSubject("pay"), Data: data}); err != nil {
			t.Fatal(err)
		}
		fleettest.WaitFor(t, 10*time.Second, id+" held", func() bool {
			audit, err = svc.Audit(t.Context(), approval.AuditFilter{})
			return err == nil && len(audit) == i+1
		})
	}
	for _, tc := range []struct {
		since string
		want  []approval.AuditEvent
	}{
		{audit[1].Time.Format(time.RFC3339Nano), audit[1:]},
		{"1h", audit},
	} {
		var stdout, stderr bytes.Buffer
		err := runApprovals(t.Context(), []string{"audit", "--since", tc.since, "--approval-url", api.URL, "--token", token}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("approvals audit --since %s: %v (%s)", tc.since, err, stderr.String())
		}
		lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		if len(lines) != len(tc.want) {
			t.Fatalf("--since %s printed %d lines, want %d:\n%s", tc.since, len(lines), len(tc.want), stdout.String())
		}
		for i, line := range lines {
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("line %d is not a JSON object: %q", i, line)
			}
			if got["id"] != tc.want[i].ID || got["event"] != "requested" || got["call_id"] != tc.want[i].CallID || got["time"] == nil {
				t.Errorf("--since %s, line %d = %v, want entry %s (requested %s) with its time", tc.since, i, got, tc.want[i].ID, tc.want[i].CallID)
			}
		}
	}
}
