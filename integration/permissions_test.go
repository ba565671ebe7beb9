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
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// permServer is a server loaded from deploy/nats/accounts.conf as it is
// deployed, with a password for each of its users.
type permServer struct {
	nats      *testserver.NATS
	passwords map[string]string
}

func startPermServer(t *testing.T) *permServer {
	t.Helper()
	ps := &permServer{passwords: map[string]string{}}
	for user, env := range deploy.Users() {
		ps.passwords[user] = "pw-" + user
		t.Setenv(env, ps.passwords[user]) // the configuration reads them from the environment
	}
	file := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(file, deploy.NATSAccounts, 0o600); err != nil {
		t.Fatal(err)
	}
	ps.nats = testserver.StartNATS(t, testserver.NATSOptions{ConfigFile: file})
	admin := ps.connect(t, "admin", nil)
	js, _ := jetstream.New(admin)
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	return ps
}

// connect connects as user with the user's inbox prefix; violations, the
// server's -ERR for a denied publish or subscription, go to errs.
func (ps *permServer) connect(t *testing.T, user string, errs chan<- error) *nats.Conn {
	t.Helper()
	return ps.nats.Connect(t, nats.UserInfo(user, ps.passwords[user]), nats.CustomInboxPrefix(deploy.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errs != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}))
}

// TestPermissions checks each role's permissions of deploy/nats/accounts.conf
// on a server that loaded it: what a role must not do is refused by the
// server, and the neighbouring thing it must do is not.
func TestPermissions(t *testing.T) {
	ps := startPermServer(t)
	const (
		pub = "publish"
		sub = "subscribe"
	)
	tests := []struct {
		name, user, op, subject string
		denied                  bool
	}{
		{"worker publishes a result", "worker", pub, "windlass.result.dispatcher-a.0123", false},
		{"worker reports progress", "worker", pub, "windlass.event.0123.progress", false},
		{"worker queues a call", "worker", pub, layout.CallSubject("add", "c1"), true},
		{"worker releases a gated call", "worker", pub, layout.CallSubject("transfer_funds", "c2"), true},
		{"worker sends a gated call for approval", "worker", pub, "windlass.approval.transfer_funds", true},
		{"worker forges a queued event", "worker", pub, "windlass.event.0123.queued", true},
		{"worker cancels a call", "worker", pub, "windlass.cancel.0123", true},
		{"worker deletes the calls stream", "worker", pub, "$JS.API.STREAM.DELETE.WINDLASS_CALLS", true},
		{"worker creates its tool's consumer", "worker", pub, "$JS.API.CONSUMER.CREATE.WINDLASS_CALLS.tool-add.windlass.call.add.*", false},
		{"worker creates a consumer of every call", "worker", pub, "$JS.API.CONSUMER.CREATE.WINDLASS_CALLS.tool-add.windlass.call.>", true},
		{"worker migrates the calls stream", "worker", pub, "$JS.API.STREAM.UPDATE.WINDLASS_CALLS", true},
		{"worker creates a stream", "worker", pub, "$JS.API.STREAM.CREATE.WINDLASS_CALLS", true},
		{"worker pulls gated calls", "worker", pub, "$JS.API.CONSUMER.MSG.NEXT.WINDLASS_APPROVALS.approval-service", true},
		{"worker acks a held call", "worker", pub, "$JS.ACK.WINDLASS_APPROVALS.approval-service.1.1.1.1.1", true},
		{"worker reads a dispatcher's results", "worker", sub, "windlass.result.dispatcher-a.*", true},
		{"worker reads every inbox", "worker", sub, "_INBOX.>", true},
		{"worker reads its inbox", "worker", sub, "_INBOX_worker.>", false},
		{"worker records a refusal", "worker", pub, "windlass.refused.transfer_funds", false},
		{"worker opens the release ledger", "worker", pub, "$JS.API.STREAM.INFO.KV_WINDLASS_RELEASES", false},
		{"worker claims a release", "worker", pub, "$KV.WINDLASS_RELEASES.0123", false},
		{"worker deletes the release ledger", "worker", pub, "$JS.API.STREAM.DELETE.KV_WINDLASS_RELEASES", true},
		{"worker purges a claim", "worker", pub, "$JS.API.STREAM.PURGE.KV_WINDLASS_RELEASES", true},

		{"dispatcher queues an ungated call", "dispatcher-a", pub, layout.CallSubject("add", "c1"), false},
		{"dispatcher releases a gated call itself", "dispatcher-a", pub, layout.CallSubject("transfer_funds", "c2"), true},
		{"dispatcher sends a gated call for approval", "dispatcher-a", pub, "windlass.approval.transfer_funds", false},
		{"dispatcher pulls gated calls", "dispatcher-a", pub, "$JS.API.CONSUMER.MSG.NEXT.WINDLASS_APPROVALS.approval-service", true},
		{"dispatcher pulls a tool's calls", "dispatcher-a", pub, "$JS.API.CONSUMER.MSG.NEXT.WINDLASS_CALLS.tool-add", true},
		{"dispatcher reports a call started", "dispatcher-a", pub, "windlass.event.0123.started", true},
		{"dispatcher receives its results", "dispatcher-a", sub, "windlass.result.dispatcher-a.*", false},
		{"dispatcher receives another's results", "dispatcher-a", sub, "windlass.result.dispatcher-b.*", true},
		{"dispatcher receives every result", "dispatcher-a", sub, "windlass.result.*.*", true},
		{"dispatcher reads another's inbox", "dispatcher-a", sub, "_INBOX_dispatcher-b.>", true},
		{"dispatcher reads the calls", "dispatcher-a", sub, "windlass.call.*.*", true},
		{"dispatcher reads a queued call", "dispatcher-a", pub, "$JS.API.DIRECT.GET.WINDLASS_CALLS", false},
		{"dispatcher reads a queued call from the leader", "dispatcher-a", pub, "$JS.API.STREAM.MSG.GET.WINDLASS_CALLS", false},
		{"dispatcher queues a call on the old subject", "dispatcher-a", pub, "windlass.call.add", true},
		{"dispatcher claims a release", "dispatcher-a", pub, "$KV.WINDLASS_RELEASES.0123", true},
		{"dispatcher forges a refusal", "dispatcher-a", pub, "windlass.refused.transfer_funds", true},

		{"approval releases a gated call", "approval", pub, layout.CallSubject("transfer_funds", "c2"), false},
		{"approval queues an ungated call", "approval", pub, layout.CallSubject("add", "c1"), true},
		{"approval answers a rejected call", "approval", pub, "windlass.result.dispatcher-a.0123", false},
		{"approval migrates the calls stream", "approval", pub, "$JS.API.STREAM.UPDATE.WINDLASS_CALLS", false},
		{"approval changes the results stream", "approval", pub, "$JS.API.STREAM.UPDATE.WINDLASS_RESULTS", true},
		{"approval deletes a stream", "approval", pub, "$JS.API.STREAM.DELETE.WINDLASS_CALLS", true},
		{"approval pulls a tool's calls", "approval", pub, "$JS.API.CONSUMER.MSG.NEXT.WINDLASS_CALLS.tool-add", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := make(chan error, 4)
			nc := ps.connect(t, tt.user, errs)
			var err error
			if tt.op == pub {
				err = nc.Publish(tt.subject, []byte("{}"))
			} else {
				_, err = nc.SubscribeSync(tt.subject)
			}
			if err != nil {
				t.Fatal(err)
			}
			// The server answers a PING after it has processed (and
			// refused) what came before it; the violation is reported
			// asynchronously, so wait a moment for it when expected.
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			wait := 200 * time.Millisecond
			if tt.denied {
				wait = 5 * time.Second
			}
			var got error
			select {
			case got = <-errs:
			case <-time.After(wait):
			}
			denied := got != nil && errors.Is(got, nats.ErrPermissionViolation) && strings.Contains(got.Error(), tt.subject)
			if got != nil && !denied {
				t.Fatalf("unexpected error: %v", got)
			}
			if denied != tt.denied {
				t.Fatalf("%s %s %q: denied=%v, want %v", tt.user, tt.op, tt.subject, denied, tt.denied)
			}
		})
	}
}

// TestWorkerDeniedQueueingACall shows what a worker sees when it tries to
// publish a call, with the JetStream client a worker uses: the server
// refuses the publish, the client reports the violation and gets no
// acknowledgement, and the calls stream stays empty.
func TestWorkerDeniedQueueingACall(t *testing.T) {
	ps := startPermServer(t)
	errs := make(chan error, 4)
	js, err := jetstream.New(ps.connect(t, "worker", errs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = js.Publish(ctx, layout.CallSubject("add", "c1"), []byte(`{"id":"c1","name":"add","arguments":{"a":1,"b":2}}`))
	if err == nil {
		t.Fatal("a worker's publish of a call was acknowledged")
	}
	select {
	case v := <-errs:
		if !errors.Is(v, nats.ErrPermissionViolation) || !strings.Contains(v.Error(), `Publish to "windlass.call.add.`) {
			t.Fatalf("violation = %v", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation reported")
	}
	adminJS, _ := jetstream.New(ps.connect(t, "admin", nil))
	s, err := adminJS.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("the calls stream holds %d messages after a denied publish", info.State.Msgs)
	}
}
