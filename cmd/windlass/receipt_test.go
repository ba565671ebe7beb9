package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestReceiptVerify: `receipt verify` of a call released through the
// approval service prints what its receipt attests and exits 0; --json
// says verified; once the worker's key is not published it fails naming
// the key check (exit 1), and verifies again against the key given with
// --key; a stored result altered after signing fails naming the result
// hash check; a call without a result exits 3.
func TestReceiptVerify(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	f := fleettest.New(t)
	priv, pubText, _ := release.GenerateKey()
	key, _ := release.ParsePrivateKey(priv)
	pub, _ := release.ParsePublicKey(pubText)
	type payArgs struct {
		To     string  `json:"to"`
		Amount float64 `json:"amount"`
	}
	pay := windlass.MustFunc("pay", func(_ context.Context, in payArgs) (string, error) { return "paid " + in.To, nil }, windlass.WithApproval())
	w := f.StartWorker(worker.Config{Releases: release.NewVerifier(pub)}, pay)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "pay")
	svc, err := approval.New(approval.Config{Conn: f.Conn(), Redis: f.Redis.Client(t), Registry: f.Registry(), Signer: release.NewSigner(key),
		Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: approval.HashToken(approval.NewToken())}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	id, err := d.Submit(t.Context(), "pay", payArgs{To: "bob", Amount: 3}, dispatcher.WithCallID("verify-1"))
	if err != nil {
		t.Fatal(err)
	}
	var h *approval.HeldCall
	fleettest.WaitFor(t, 10*time.Second, "call held", func() bool {
		h, err = svc.Get(t.Context(), id)
		return err == nil
	})
	if _, err := svc.Approve(t.Context(), id, "alice", h.ArgsHash, nil); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer wcancel()
	if r, err := d.Wait(wctx, id); err != nil || r.IsError {
		t.Fatalf("Wait = %+v, %v", r, err)
	}

	verify := func(extra ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"receipt", "verify", id, "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL(), "--log-level", "error"}, extra...)
		err := run(t.Context(), args, &stdout, &stderr)
		return stdout.String(), err
	}
	exitCode := func(err error) int {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return -1
	}

	out, err := verify()
	if err != nil {
		t.Fatalf("receipt verify: %v\n%s", err, out)
	}
	for _, want := range []string{"verified: receipt of call verify-1", "tool:      pay", "approved by alice", "worker:    " + w.ID(), "ran:"} {
		if !strings.Contains(out, want) {
			t.Errorf("receipt verify printed no %q:\n%s", want, out)
		}
	}
	out, err = verify("--json")
	var rep struct {
		Verified  bool   `json:"verified"`
		PublicKey string `json:"public_key"`
		Receipt   struct {
			KeyID string `json:"key_id"`
		} `json:"receipt"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || !rep.Verified || rep.PublicKey == "" {
		t.Fatalf("receipt verify --json = %v\n%s", err, out)
	}

	// The key is no longer published: the key check fails.
	if err := f.RedisClient().Del(t.Context(), "windlass:{registry}:receiptkey:"+rep.Receipt.KeyID).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(); exitCode(err) != 1 || !strings.Contains(err.Error(), "check key failed") {
		t.Fatalf("with the key unpublished: %v (exit %d), want exit 1 naming the key check", err, exitCode(err))
	}
	// The key given out of band.
	if out, err := verify("--key", rep.PublicKey); err != nil {
		t.Fatalf("receipt verify --key: %v\n%s", err, out)
	}

	// The stored result altered after signing (its message replaced,
	// headers and receipt kept).
	js := f.JetStream()
	results, err := js.Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := results.GetLastMsgForSubject(t.Context(), layout.ResultByCall(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := results.DeleteMsg(t.Context(), m.Sequence); err != nil {
		t.Fatal(err)
	}
	forged := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: bytes.Replace(m.Data, []byte("paid bob"), []byte("paid eve"), 1)}
	forged.Header.Del(nats.MsgIdHdr)
	if bytes.Equal(forged.Data, m.Data) {
		t.Fatalf("nothing altered in %s", m.Data)
	}
	if _, err := js.PublishMsg(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	if _, err := verify("--key", rep.PublicKey); exitCode(err) != 1 || !strings.Contains(err.Error(), "check result_hash failed") {
		t.Fatalf("with the result altered: %v (exit %d), want exit 1 naming the result hash check", err, exitCode(err))
	}

	// No result: nothing to check.
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"receipt", "verify", "never-called", "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL(), "--log-level", "error"}, &stdout, &stderr)
	if exitCode(err) != 3 {
		t.Fatalf("a call without a result: %v (exit %d), want 3", err, exitCode(err))
	}
}
