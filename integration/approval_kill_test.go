package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/demotools"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

// TestApprovalServiceKilledLosesNothing runs the approval service as its own
// process (`windlass approval`), holds calls, kills it with SIGKILL in the
// middle of the intake, starts it again, and decides every call: none is
// lost, each still decidable, each approved one run exactly once.
func TestApprovalServiceKilledLosesNothing(t *testing.T) {
	t.Parallel()
	bin := cliBuild(t)
	f := newFleet(t, fleettest.WithRedis(testserver.RedisOptions{Persist: true}))

	priv, pub, _ := release.GenerateKey()
	pubKey, _ := release.ParsePublicKey(pub)
	runs := map[string]int{}
	results := make(chan string, 100)
	pay := windlass.MustFunc("transfer_funds", func(ctx context.Context, in demotools.TransferArgs) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		results <- info.ID
		return "sent", nil
	}, windlass.WithApproval())
	f.StartWorker(worker.Config{Releases: release.NewVerifier(pubKey)}, pay)
	d := f.Dispatcher(dispatcher.Config{})
	waitLive(t, d, "transfer_funds", 1)

	token := approval.NewToken()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	_ = ln.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "approval", "--listen", addr)
		cmd.Env = append(cliEnv(t.TempDir()+"/dev.json"),
			"WINDLASS_NATS_URL="+f.NATS.URL(), "WINDLASS_REDIS_URL="+f.Redis.URL(),
			"WINDLASS_RELEASE_KEY="+priv, "WINDLASS_REVIEWERS=alice="+approval.HashToken(token))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		fleettest.WaitFor(t, 20*time.Second, "approval service up", func() bool {
			resp, err := http.Get("http://" + addr + "/")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
		return cmd
	}
	api := func(method, path string, body any) (int, map[string]any) {
		var rd bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = *bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, &rd)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}

	svc := start()
	var ids []string
	for i := range 20 {
		id, err := d.Submit(t.Context(), "transfer_funds", map[string]any{"to": fmt.Sprint("acct-", i), "amount": i + 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 10 {
			_ = svc.Process.Signal(syscall.SIGKILL) // mid-intake
			_ = svc.Wait()
		}
	}
	start() // the calls submitted while it was dead wait in the stream
	for _, id := range ids {
		var h map[string]any
		// A call in flight when the process died comes back after the
		// consumer's ack wait (10 s).
		fleettest.WaitFor(t, 40*time.Second, "call "+id+" held", func() bool {
			code, m := api("GET", "/v1/approvals/"+id, nil)
			h = m
			return code == http.StatusOK
		})
		if h["status"] != "pending" {
			t.Fatalf("call %s after the restart: %v", id, h)
		}
		if code, m := api("POST", "/v1/approvals/"+id+"/approve", map[string]any{"args_hash": h["args_hash"]}); code != http.StatusOK {
			t.Fatalf("approve %s: %d %v", id, code, m)
		}
	}
	for range ids {
		select {
		case id := <-results:
			runs[id]++
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d approved calls ran", len(runs), len(ids))
		}
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("call %s ran %d times", id, runs[id])
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r, err := d.Wait(ctx, id)
		cancel()
		if err != nil || r.IsError {
			t.Errorf("result of %s: %+v, %v", id, r, err)
		}
	}
}
