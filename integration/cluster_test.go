package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/registry"
)

// localCluster is a running deploy/local: three NATS node processes, Redis,
// the approval service and two worker processes, under the per-role users
// of deploy/nats/accounts.conf.
type localCluster struct {
	cmd   *exec.Cmd
	done  chan struct{}
	state struct {
		Dir   string `json:"dir"`
		Nodes []struct {
			Name       string `json:"name"`
			ClientPort int    `json:"client_port"`
			PID        int    `json:"pid"`
		} `json:"nodes"`
		RedisURL  string            `json:"redis_url"`
		Passwords map[string]string `json:"passwords"`
		Ready     bool              `json:"ready"`
	}
}

// startLocalCluster builds the windlass binary and deploy/local and runs
// the local cluster until the test ends.
func startLocalCluster(t *testing.T, args ...string) *localCluster {
	t.Helper()
	bin := cliBuild(t)
	local := filepath.Join(t.TempDir(), "local")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", local, "./deploy/local")
	build.Dir = cliModuleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./deploy/local: %v\n%s", err, out)
	}
	dir := t.TempDir()
	lc := &localCluster{done: make(chan struct{})}
	lc.cmd = exec.Command(local, append([]string{"-dir", dir, "-windlass", bin}, args...)...)
	out := &cliBuffer{}
	lc.cmd.Stdout, lc.cmd.Stderr = out, out
	lc.cmd.Env = cliEnv(filepath.Join(dir, "no-dev.json"))
	lc.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := lc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = lc.cmd.Wait(); close(lc.done) }()
	t.Cleanup(func() {
		_ = lc.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-lc.done:
		case <-time.After(60 * time.Second):
			_ = lc.cmd.Process.Kill()
			<-lc.done
		}
		if t.Failed() {
			for _, name := range []string{"node-1", "node-2", "node-3", "approval", "worker-1", "worker-2"} {
				if b, err := os.ReadFile(filepath.Join(dir, name+".log")); err == nil {
					t.Logf("--- %s.log (last 3000 bytes)\n%s", name, tail(b, 3000))
				}
			}
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "fleet.json"))
		if err == nil && json.Unmarshal(b, &lc.state) == nil && lc.state.Ready {
			return lc
		}
		select {
		case <-lc.done:
			t.Fatalf("deploy/local exited before the cluster was ready:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("deploy/local not ready within 3m:\n%s", out.String())
		}
	}
}

func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }

// connect connects to every node as user, with the user's inbox prefix.
func (lc *localCluster) connect(t *testing.T, user string) *nats.Conn {
	t.Helper()
	var urls []string
	for _, n := range lc.state.Nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.ClientPort))
	}
	nc, err := nats.Connect(urls[0]+","+urls[1]+","+urls[2], nats.UserInfo(user, lc.state.Passwords[user]),
		nats.CustomInboxPrefix(deploy.InboxPrefix(user)), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // Wait's denied per-call subscription: it polls
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestClusterLeaderKilled kills (SIGKILL) the NATS node that leads the calls
// stream while a dispatcher keeps 24 calls in flight through the local
// cluster's worker processes, and checks that every call the fleet accepted
// (its publish was acknowledged) is answered, correctly. Submits that fail
// while the stream elects a new leader are retried with the same call id,
// as a caller would; the stream's deduplication keeps a retried call to one.
// So are waits that fail with the fleet unreachable.
//
// WINDLASS_CLUSTER_CALLS sets the number of calls (default 900) for a
// longer run.
func TestClusterLeaderKilled(t *testing.T) {
	total := 900
	if v, err := strconv.Atoi(os.Getenv("WINDLASS_CLUSTER_CALLS")); err == nil && v > 0 {
		total = v
	}
	const inflight = 24
	lc := startLocalCluster(t, "-worker-ack-wait", "2s", "-worker-shutdown-grace", "2s")

	nc := lc.connect(t, "dispatcher-a")
	opts, err := redis.ParseURL(lc.state.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	reg, err := registry.New(registry.Config{Client: rc})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(t.Context(), dispatcher.Config{Conn: nc, Registry: reg, ID: "dispatcher-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	adminNC := lc.connect(t, "admin")
	js, _ := jetstream.New(adminNC)
	leaderOf := func(ctx context.Context) string {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s, err := js.Stream(ctx, layout.CallsStream)
		if err != nil {
			return ""
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil {
			return ""
		}
		if info.Config.Replicas != 3 {
			t.Errorf("the calls stream has %d replicas, want 3", info.Config.Replicas)
		}
		return info.Cluster.Leader
	}

	var (
		next, accepted, answered, wrong, unaccepted atomic.Int64
		submitErrors, waitErrors                    atomic.Int64
		killedAt                                    atomic.Pointer[time.Time]
		firstAfterKill                              atomic.Pointer[time.Time]
		mu                                          sync.Mutex
		lost                                        []string
	)
	killed := make(chan string, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range inflight {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(total) {
					return
				}
				id := fmt.Sprintf("kill-%d", i)
				text := "call " + id
				// Submit until accepted: a failed submit during the election
				// is retried with the same id.
				start := time.Now()
				ok := false
				for time.Since(start) < time.Minute {
					sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := d.Submit(sctx, "echo", map[string]string{"text": text}, dispatcher.WithCallID(id), dispatcher.WithTimeout(2*time.Minute))
					scancel()
					if err == nil {
						ok = true
						break
					}
					submitErrors.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
				if !ok {
					unaccepted.Add(1)
					continue
				}
				if k := killedAt.Load(); k != nil && start.After(*k) {
					now := time.Now()
					firstAfterKill.CompareAndSwap(nil, &now)
				}
				if accepted.Add(1) == int64(total/3) {
					leader := leaderOf(ctx)
					for _, n := range lc.state.Nodes {
						if n.Name == leader {
							now := time.Now()
							if err := syscall.Kill(n.PID, syscall.SIGKILL); err != nil {
								t.Errorf("kill %s: %v", n.Name, err)
							}
							killedAt.Store(&now)
							killed <- leader
						}
					}
				}
				// Wait returns a fetch error at once (the results stream
				// electing a leader too): a caller waits again, by id.
				var r windlass.ToolResult
				var err error
				for deadline := time.Now().Add(30 * time.Second); ; {
					wctx, wcancel := context.WithDeadline(ctx, deadline)
					r, err = d.Wait(wctx, id)
					wcancel()
					if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
						break
					}
					waitErrors.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
				switch {
				case err != nil:
					mu.Lock()
					lost = append(lost, id)
					mu.Unlock()
				case r.IsError || r.Content != text:
					wrong.Add(1)
					t.Errorf("%s: result %q (error %v), want %q", id, r.Content, r.IsError, text)
				default:
					answered.Add(1)
				}
			}
		})
	}
	var leader string
	select {
	case leader = <-killed:
	case <-ctx.Done():
		t.Fatal("the leader of the calls stream was never killed")
	}
	k := *killedAt.Load()
	var newLeader string
	for newLeader == "" || newLeader == leader {
		if time.Since(k) > time.Minute {
			t.Fatalf("no new leader of the calls stream within 1m of killing %s", leader)
		}
		time.Sleep(50 * time.Millisecond)
		newLeader = leaderOf(ctx)
	}
	elected := time.Since(k)
	wg.Wait()
	recovered := time.Duration(0)
	if f := firstAfterKill.Load(); f != nil {
		recovered = f.Sub(k)
	}
	t.Logf("calls: submitted %d, accepted %d, answered %d, wrong %d, lost %d, never accepted %d; failed submits retried %d, failed waits retried %d",
		total, accepted.Load(), answered.Load(), wrong.Load(), len(lost), unaccepted.Load(), submitErrors.Load(), waitErrors.Load())
	t.Logf("killed %s (leader of %s) after %d accepted calls; new leader %s elected after %s; first call accepted after the kill: %s after it",
		leader, layout.CallsStream, total/3, newLeader, elected.Round(time.Millisecond), recovered.Round(time.Millisecond))
	// A wait that ended without the result is not yet a lost call: ask the
	// results stream's leader (not a replica: a direct get may be answered
	// by a replica that has not caught up) whether the result is stored.
	var late, missing []string
	for _, id := range lost {
		if storedOnLeader(t, adminNC, id) {
			late = append(late, id)
		} else {
			missing = append(missing, id)
		}
	}
	t.Logf("calls lost (no stored result): %d; answered, but Wait did not see the result within 30s: %d %v",
		len(missing), len(late), late[:min(len(late), 10)])
	if len(missing) > 0 {
		t.Errorf("%d accepted calls have no result: %v", len(missing), missing[:min(len(missing), 20)])
	}
	if int(answered.Load())+len(late) != total {
		t.Errorf("answered %d of %d calls (%d more stored but not seen)", answered.Load(), total, len(late))
	}
	if unaccepted.Load() > 0 {
		t.Errorf("%d calls were never accepted in a minute of retries", unaccepted.Load())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the load did not finish within 4m")
	}
}

// storedOnLeader asks the results stream's leader, with a (non-direct)
// message get, whether a call's result is stored.
func storedOnLeader(t *testing.T, nc *nats.Conn, callID string) bool {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"seq": 1, "next_by_subj": layout.ResultByCall(callID)})
	m, err := nc.Request("$JS.API.STREAM.MSG.GET."+layout.ResultsStream, req, 5*time.Second)
	if err != nil {
		t.Errorf("get the result of %s from the leader: %v", callID, err)
		return false
	}
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
		} `json:"message"`
	}
	return json.Unmarshal(m.Data, &resp) == nil && resp.Message != nil
}
