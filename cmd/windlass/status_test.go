package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// eventsDenied is a NATS configuration whose user "cli" may do everything
// but read the events stream's messages: to the dispatcher, a stream that
// cannot be read, while the results stream answers.
const eventsDenied = `
authorization {
  users = [
    {user: cli, password: cli, permissions: {publish: {deny: [
      "$JS.API.DIRECT.GET.WINDLASS_EVENTS", "$JS.API.DIRECT.GET.WINDLASS_EVENTS.>",
      "$JS.API.STREAM.MSG.GET.WINDLASS_EVENTS"
    ]}}}
  ]
}
`

// TestStatusAndCancelSayUnavailable runs `status` and `cancel` while the
// events stream cannot be read: both say the fleet is unavailable and to
// try again, never that the call is unknown, and print no status.
func TestStatusAndCancelSayUnavailable(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(eventsDenied), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, rs := testserver.StartNATS(t, testserver.NATSOptions{ConfigFile: conf}), testserver.StartRedis(t)
	url := strings.Replace(ns.URL(), "nats://", "nats://cli:cli@", 1)
	for _, cmd := range []string{"status", "cancel"} {
		t.Run(cmd, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), []string{cmd, "call_accepted_maybe", "--nats-url", url, "--redis-url", rs.URL(), "--log-level", "error"}, &stdout, &stderr)
			var ee *exitError
			if err == nil || (errors.As(err, &ee) && ee.code == 2) {
				t.Fatalf("%s = %v; want a failure, not a usage error", cmd, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "unavailable, try again") || strings.Contains(msg, "no record") {
				t.Errorf("%s says %q; want it to say unavailable, try again, not that the call is unknown", cmd, msg)
			}
			t.Logf("%s: windlass: %v", cmd, err)
			if strings.Contains(stdout.String(), "unknown") {
				t.Errorf("%s printed %q", cmd, stdout.String())
			}
		})
	}
}
