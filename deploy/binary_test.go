package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// command is what the windlass binary accepts for one subcommand, read from
// its own --help output.
type command struct {
	flags map[string]bool // without dashes
	envs  map[string]bool // WINDLASS_…
}

// binary is the windlass binary's subcommands.
type binary map[string]command

var (
	usageFlag = regexp.MustCompile(`^  -([a-z0-9-]+)`)
	usageEnv  = regexp.MustCompile(`\(\$(WINDLASS_[A-Z0-9_]+)\)`)
	usageCmd  = regexp.MustCompile(`^  ([a-z]+) +\S`)
)

// buildBinary builds cmd/windlass and reads each subcommand's flags and
// environment variables from `windlass help` and `windlass CMD -h`, so the
// manifests are checked against what the binary really accepts.
func buildBinary(t *testing.T) binary {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "windlass")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/windlass")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/windlass: %v\n%s", err, out)
	}
	help := func(args ...string) string {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "WINDLASS_") })
		out, _ := cmd.CombinedOutput() // -h exits 0, help without a command 2
		return string(out)
	}
	b := binary{}
	for line := range strings.SplitSeq(help("help"), "\n") {
		if m := usageCmd.FindStringSubmatch(line); m != nil {
			b[m[1]] = command{flags: map[string]bool{}, envs: map[string]bool{}}
		}
	}
	if len(b) < 5 {
		t.Fatalf("read %d subcommands from `windlass help`", len(b))
	}
	for name, c := range b {
		sc := bufio.NewScanner(strings.NewReader(help(name, "-h")))
		for sc.Scan() {
			if m := usageFlag.FindStringSubmatch(sc.Text()); m != nil {
				c.flags[m[1]] = true
			}
			if m := usageEnv.FindStringSubmatch(sc.Text()); m != nil {
				c.envs[m[1]] = true
			}
		}
	}
	if !b["worker"].flags["nats-url"] || !b["worker"].envs["WINDLASS_NATS_URL"] {
		t.Fatalf("could not read the worker's flags from its help: %v", b["worker"])
	}
	return b
}

// checkInvocation checks a container's arguments and environment against
// the binary: a known subcommand, known flags, WINDLASS_ variables the
// subcommand reads. Other variables are allowed only where compose names
// them in allowOther, or where Kubernetes substitutes them into another
// variable ($(NAME)).
func (b binary) checkInvocation(t *testing.T, where string, args []string, env map[string]string, allowOther func(string) bool) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no subcommand", where)
		return
	}
	c, ok := b[args[0]]
	if !ok {
		t.Errorf("%s: windlass has no subcommand %q", where, args[0])
		return
	}
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			continue // a positional argument (call TOOL JSON)
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !c.flags[name] {
			t.Errorf("%s: windlass %s has no flag %q", where, args[0], a)
		}
	}
	for k := range env {
		switch {
		case strings.HasPrefix(k, "WINDLASS_"):
			if !c.envs[k] {
				t.Errorf("%s: windlass %s reads no %s", where, args[0], k)
			}
		case allowOther != nil && allowOther(k):
		default:
			t.Errorf("%s: %s is not an environment variable windlass %s reads", where, k, args[0])
		}
	}
}

// portOf is the port of a host:port.
func portOf(t *testing.T, where, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Errorf("%s: %q is not host:port: %v", where, hostport, err)
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Errorf("%s: port %q: %v", where, p, err)
	}
	return n
}

// natsServerVersion is the nats-server module version (go.mod) the tests
// parse the configuration with: the images must run the same release.
func natsServerVersion(t *testing.T) string {
	t.Helper()
	for line := range strings.SplitSeq(string(readFile(t, "../go.mod")), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/nats-io/nats-server/v2" {
			return strings.TrimPrefix(f[1], "v")
		}
	}
	t.Fatal("go.mod requires no nats-server/v2")
	return ""
}

// readFile reads a file of deploy/.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
}
