package integration_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/fleettest"
)

// TestCLIRefundIsGatedOverAHundred runs the README's example on the dev
// fleet: a refund of 20 runs at once; one of 250 waits for a person (the
// call says so on stderr), runs once approved from the CLI, and `status`
// shows it held meanwhile, with the tool's condition.
func TestCLIRefundIsGatedOverAHundred(t *testing.T) {
	bin := cliBuild(t)
	devFile := filepath.Join(t.TempDir(), "windlass", "dev.json")
	env := append(cliEnv(devFile), "TMPDIR="+t.TempDir())
	dev := cliStartDev(t, bin, env)
	dev.waitStdout(t, 90*time.Second, "banner", func(out string) bool {
		return strings.Contains(out, "Windlass dev fleet is running.") && strings.Contains(out, "refund (over 100)")
	})
	cmdEnv := cliEnv(devFile)

	if r := cliRun(t, bin, cmdEnv, "call", "refund", `{"order":"o-1","amount":20}`); r.code != 0 || strings.TrimSpace(r.stdout) != "refunded 20.00 on order o-1" || strings.Contains(r.stderr, "needs approval") {
		t.Fatalf("call refund 20: %s", r)
	}

	results := make(chan cliResult, 1)
	go func() {
		results <- cliRun(t, bin, cmdEnv, "call", "refund", `{"order":"o-2","amount":250}`, "--id", "refund-big")
	}()
	var status struct {
		Tools []struct {
			Tool              string
			ApprovalCondition string `json:"approval_condition"`
			Held              int
		}
	}
	held := func() (int, string) {
		for _, tool := range status.Tools {
			if tool.Tool == "refund" {
				return tool.Held, tool.ApprovalCondition
			}
		}
		return -1, ""
	}
	fleettest.WaitFor(t, 30*time.Second, "status --json shows the refund held", func() bool {
		r := cliRun(t, bin, cmdEnv, "status", "--json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &status) != nil {
			t.Fatalf("status --json: %s", r)
		}
		n, _ := held()
		return n == 1
	})
	if _, cond := held(); cond != "args.amount > 100.0" {
		t.Errorf("status shows refund's condition as %q", cond)
	}
	select {
	case r := <-results:
		t.Fatalf("the refund of 250 returned before anyone approved it: %s", r)
	default:
	}
	if r := cliRun(t, bin, cmdEnv, "approvals", "approve", "refund-big"); r.code != 0 || !strings.Contains(r.stdout, "approved") {
		t.Fatalf("approvals approve: %s", r)
	}
	r := <-results
	if r.code != 0 || strings.TrimSpace(r.stdout) != "refunded 250.00 on order o-2" || !strings.Contains(r.stderr, "call refund-big to refund needs approval; waiting") {
		t.Errorf("the approved refund: %s", r)
	}
}
