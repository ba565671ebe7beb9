package integration_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestAUserDeniedCreatingStreamsIsToldAtOnce: a worker user (deploy/nats
// accounts.conf: may not create streams) starts before any stream exists.
// The create is refused by a permissions violation the client sees only as
// a request timeout; at 34ce501 it was asked again for 30 s and ended with
// a bare timeout (found by a review helper). It ends after the first,
// with ErrNotPermitted naming the request.
func TestAUserDeniedCreatingStreamsIsToldAtOnce(t *testing.T) {
	passwords := map[string]string{}
	for user, env := range deploy.Users() {
		passwords[user] = "pw-" + user
		t.Setenv(env, passwords[user])
	}
	file := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(file, deploy.NATSAccounts, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := testserver.StartNATS(t, testserver.NATSOptions{ConfigFile: file})
	nc := ns.Connect(t, nats.UserInfo("worker", passwords["worker"]), nats.CustomInboxPrefix(deploy.InboxPrefix("worker")))
	js, _ := jetstream.New(nc)
	start := time.Now()
	err := layout.EnsureStreams(t.Context(), js, layout.CallsConfig(layout.StreamOptions{}))
	t.Logf("after %s: %v", time.Since(start).Round(100*time.Millisecond), err)
	if !errors.Is(err, layout.ErrNotPermitted) || !strings.Contains(err.Error(), "STREAM.CREATE") {
		t.Errorf("EnsureStreams = %v; want ErrNotPermitted naming the create", err)
	}
	if time.Since(start) > 16*time.Second {
		t.Errorf("a create the server refuses for permissions took %s to fail: asked again", time.Since(start).Round(time.Second))
	}
}
