package deploy_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// sentinelConfLine is one line of the Sentinel configuration compose.yaml
// writes, quoted in its shell script.
var sentinelConfLine = regexp.MustCompile(`(?m)^\s*['"]((?:port|sentinel|requirepass) [^'"]*)['"]`)

// TestComposeSentinelConfigLoads runs a real Sentinel on the configuration
// compose.yaml writes (its master's host and port swapped for a test
// server's, $REDIS_PASSWORD for a password both use): redis-server accepts
// every line, and the Sentinel authenticates to the master and reads its
// role (INFO).
func TestComposeSentinelConfigLoads(t *testing.T) {
	var c composeFile
	decodeStrict(t, "compose.yaml", readFile(t, "compose.yaml"), &c)
	script := strings.Join(c.Services["redis-sentinel-1"].Command, " ")
	var lines []string
	for _, m := range sentinelConfLine.FindAllStringSubmatch(script, -1) {
		lines = append(lines, m[1])
	}
	if len(lines) < 5 {
		t.Fatalf("found %d configuration lines in the Sentinel's script:\n%s", len(lines), script)
	}
	master := testserver.StartRedis(t)
	const pw = "s3cret"
	if err := master.Client(t).ConfigSet(t.Context(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(master.Addr())
	conf := strings.Join(lines, "\n") + "\n"
	conf = strings.ReplaceAll(conf, "$$REDIS_PASSWORD", pw)
	conf = strings.ReplaceAll(conf, "redis-master 6379", host+" "+port)
	conf = strings.ReplaceAll(conf, "port 26379", "port 0") // the port is given below
	dir := t.TempDir()
	confFile := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sport := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var out testserver.Buffer
	cmd := exec.Command("redis-server", confFile, "--sentinel", "--port", strconv.Itoa(sport), "--bind", "127.0.0.1", "--dir", dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	sc := redis.NewSentinelClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(sport)), Password: pw})
	defer sc.Close()
	var last map[string]string
	fleettest.WaitFor(t, 30*time.Second, "the Sentinel reading the master's role", func() bool {
		select {
		case <-exited:
			t.Fatalf("redis-server refused the Sentinel configuration:\n%s\n%s", conf, out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		last, _ = sc.Master(ctx, "windlass").Result()
		// info-refresh: milliseconds since the master last answered the
		// Sentinel's INFO (as many as since 1970 before it ever did).
		refreshed, _ := strconv.Atoi(last["info-refresh"])
		return last["ip"] == host && last["port"] == port && last["flags"] == "master" && last["role-reported"] == "master" && refreshed < 10_000
	})
}
