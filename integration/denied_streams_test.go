package integration_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestAUserDeniedCreatingStreamsWaitsForItsCreator: a worker user
// (deploy/nats accounts.conf: may not create streams) starts before the
// streams exist, as a worker may start before the approval service. The
// create is refused by a permissions violation the client sees only as a
// request timeout. The worker waits, asking again, and goes on once a
// role that may creates the stream — at e401f56 it failed at once, and a
// worker of the local cluster exited (a clean-clone CI run). Should no
// one create it, the ensure ends naming the permission (at 34ce501 a bare
// timeout, found by a review helper).
func TestAUserDeniedCreatingStreamsWaitsForItsCreator(t *testing.T) {
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
	connect := func(user string) (*nats.Conn, jetstream.JetStream) {
		nc := ns.Connect(t, nats.UserInfo(user, passwords[user]), nats.CustomInboxPrefix(deploy.InboxPrefix(user)),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	cfg := layout.CallsConfig(layout.StreamOptions{})

	// No one creates it: the ensure ends, naming the permission.
	_, worker := connect("worker")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err := layout.EnsureStreams(ctx, worker, cfg)
	if !errors.Is(err, layout.ErrNotPermitted) || !strings.Contains(err.Error(), "STREAM.CREATE") {
		t.Errorf("EnsureStreams with no creator = %v; want ErrNotPermitted naming the create", err)
	}

	// The approval service creates it while the worker waits.
	nc, worker := connect("worker")
	done := make(chan error, 1)
	go func() { done <- layout.EnsureStreams(t.Context(), worker, cfg) }()
	fleettest.WaitFor(t, 30*time.Second, "the worker's create refused", func() bool {
		return errors.Is(nc.LastError(), nats.ErrPermissionViolation)
	})
	_, approval := connect("approval")
	if err := layout.EnsureStreams(t.Context(), approval, cfg); err != nil {
		t.Fatalf("the approval service's EnsureStreams: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the worker's EnsureStreams = %v; want it to go on once the stream exists", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the worker's EnsureStreams did not return within 40s of the stream's creation")
	}
}
