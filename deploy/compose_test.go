package deploy_test

import (
	"bytes"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/redisurl"
	"github.com/windlass-dev/windlass/registry"
)

// composeFile is the part of the Compose specification deploy/compose.yaml
// uses; decoding rejects any other field.
type composeFile struct {
	Name       string                    `yaml:"name"`
	Services   map[string]composeService `yaml:"services"`
	Volumes    map[string]*struct{}      `yaml:"volumes"`
	Extensions map[string]any            `yaml:",inline"` // x-… anchors only
}

type composeService struct {
	Image           string            `yaml:"image"`
	Build           *composeBuild     `yaml:"build"`
	Command         []string          `yaml:"command"`
	Restart         string            `yaml:"restart"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	DependsOn       map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func decodeStrict(t *testing.T, name string, b []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestCompose checks deploy/compose.yaml: three NATS nodes of the tested
// release with the tested configuration, Redis, the approval service, two
// workers and a dispatcher, each windlass service run with a subcommand,
// flags and variables the binary accepts, under its own NATS user, on
// ports that match.
func TestCompose(t *testing.T) {
	bin := buildBinary(t)
	var c composeFile
	decodeStrict(t, "compose.yaml", readFile(t, "compose.yaml"), &c)
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("compose.yaml: unknown top-level field %q", k)
		}
	}
	natsEnv := map[string]bool{"NATS_SERVER_NAME": true}
	for _, env := range deploy.Users() {
		natsEnv[env] = true
	}
	version := natsServerVersion(t)
	var nodes, workers []string
	for name, s := range c.Services {
		where := "compose.yaml: " + name
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s: depends on a service %q that does not exist", where, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s: mounts %s: %v", where, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s: volume %q is not declared", where, src)
			}
		}
		switch {
		case strings.HasPrefix(s.Image, "nats:"):
			nodes = append(nodes, name)
			if want := "nats:" + version + "-alpine"; s.Image != want {
				t.Errorf("%s: image %s, want %s (the nats-server release the tests load the configuration with)", where, s.Image, want)
			}
			if !slices.Equal(s.Command, []string{"-c", "/etc/nats/nats.conf"}) {
				t.Errorf("%s: command %q", where, s.Command)
			}
			for _, want := range []string{"./nats/nats.conf:/etc/nats/nats.conf:ro", "./nats/accounts.conf:/etc/nats/accounts.conf:ro"} {
				if !slices.Contains(s.Volumes, want) {
					t.Errorf("%s: does not mount %s", where, want)
				}
			}
			for k := range s.Environment {
				if !natsEnv[k] {
					t.Errorf("%s: %s is no variable of nats.conf or accounts.conf", where, k)
				}
			}
			if s.Environment["NATS_SERVER_NAME"] != name {
				t.Errorf("%s: NATS_SERVER_NAME %q, want the service name (the routes of nats.conf)", where, s.Environment["NATS_SERVER_NAME"])
			}
		case s.Image == "windlass:local":
			if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" {
				t.Errorf("%s: not built from deploy/Dockerfile", where)
			} else if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", where, err)
			}
			bin.checkInvocation(t, where, s.Command, s.Environment, nil)
			checkComposeWindlass(t, where, c, s)
			if s.Command[0] == "worker" {
				workers = append(workers, name)
			}
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"nats-1", "nats-2", "nats-3"}) {
		t.Errorf("NATS nodes %v, want nats-1, nats-2, nats-3", nodes)
	}
	if len(workers) != 2 {
		t.Errorf("%d workers, want 2", len(workers))
	}
	for _, name := range []string{"redis-master", "redis-replica", "approval", "dispatcher"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("no %s service", name)
		}
	}
	if !slices.Contains(c.Services["redis-replica"].Command, "exec redis-server --appendonly yes --appendfsync always --requirepass \"$$REDIS_PASSWORD\" --masterauth \"$$REDIS_PASSWORD\" --replica-announce-ip redis-replica --replicaof redis-master 6379") {
		t.Errorf("redis-replica: command %q does not replicate redis-master with AOF and the password", c.Services["redis-replica"].Command)
	}
	// Every windlass service reaches Redis through the Sentinels, with one URL.
	urls := map[string]bool{}
	for name, s := range c.Services {
		if s.Image == "windlass:local" {
			urls[s.Environment["WINDLASS_REDIS_URL"]] = true
			if o, err := redisurl.Parse(composeVar.ReplaceAllString(s.Environment["WINDLASS_REDIS_URL"], "pw")); err != nil || o.Kind != redisurl.Sentinel {
				t.Errorf("compose.yaml: %s: WINDLASS_REDIS_URL is not the Sentinel form (%v)", name, err)
			}
		}
	}
	if len(urls) != 1 {
		t.Errorf("compose.yaml: the windlass services use %d Redis URLs, want one: %v", len(urls), slices.Collect(maps.Keys(urls)))
	}
	if got := c.Services["approval"].Environment["WINDLASS_REPLICA_ACKS"]; got != "1" {
		t.Errorf("compose.yaml: approval: WINDLASS_REPLICA_ACKS = %q; want \"1\": on Sentinel a failover would lose holds the replica never had", got)
	}
}

// sentinelMonitor is the line of a Sentinel's configuration that names the
// master it watches: its name, host, port and quorum.
var sentinelMonitor = regexp.MustCompile(`'sentinel monitor (\S+) (\S+) (\d+) (\d+)'`)

// sentinelDownAfter is the line of a Sentinel's configuration that says
// how long the master may be unreachable before it is failed over.
var sentinelDownAfter = regexp.MustCompile(`'sentinel down-after-milliseconds \S+ (\d+)'`)

// failoverWithinLease reports whether a failover after downAfter
// milliseconds (plus about two seconds to elect and promote) ends before a
// worker's registry lease, less one heartbeat, lapses: else the fleet's
// tools have no live worker until the workers' next heartbeat.
func failoverWithinLease(t *testing.T, downAfter string) bool {
	t.Helper()
	ms, err := strconv.Atoi(downAfter)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms)*time.Millisecond+2*time.Second < registry.DefaultTTL-registry.DefaultTTL/3
}

// checkComposeRedisURL checks a windlass service's WINDLASS_REDIS_URL: it
// parses as the binary parses it, and every address in it is a service's.
// In the Sentinel form, those are Sentinels (three, quorum 2) watching the
// URL's master_name on a Redis service, with the password the URL gives.
func checkComposeRedisURL(t *testing.T, where string, c composeFile, redisURL string) {
	t.Helper()
	o, err := redisurl.Parse(composeVar.ReplaceAllString(redisURL, "pw")) // ${VAR} in the passwords
	if err != nil {
		t.Errorf("%s: WINDLASS_REDIS_URL: %v", where, err)
		return
	}
	var addrs []string
	switch o.Kind {
	case redisurl.Single:
		addrs = []string{o.Single.Addr}
	case redisurl.Cluster:
		addrs = o.Cluster.Addrs
	case redisurl.Sentinel:
		addrs = o.Sentinel.SentinelAddrs
		if len(addrs) != 3 || o.Sentinel.Password == "" || o.Sentinel.SentinelPassword == "" {
			t.Errorf("%s: WINDLASS_REDIS_URL names %d Sentinels (want 3) with passwords %q (master), %q (Sentinels)",
				where, len(addrs), o.Sentinel.Password, o.Sentinel.SentinelPassword)
		}
	}
	for _, a := range addrs {
		host, port, _ := strings.Cut(a, ":")
		svc, ok := c.Services[host]
		if !ok || !strings.HasPrefix(svc.Image, "redis:") {
			t.Errorf("%s: WINDLASS_REDIS_URL names %s, not a Redis service", where, a)
			continue
		}
		if o.Kind != redisurl.Sentinel {
			continue
		}
		script := strings.Join(svc.Command, " ")
		m := sentinelMonitor.FindStringSubmatch(script)
		if port != "26379" || !strings.Contains(script, "--sentinel") || m == nil {
			t.Errorf("%s: %s is not a Sentinel on 26379 watching a master", where, a)
			continue
		}
		if m[1] != o.Sentinel.MasterName || m[4] != "2" {
			t.Errorf("%s: %s watches %q with quorum %s; want the URL's master_name %q, quorum 2", where, host, m[1], m[4], o.Sentinel.MasterName)
		}
		if master, ok := c.Services[m[2]]; !ok || !strings.HasPrefix(master.Image, "redis:") || m[3] != "6379" {
			t.Errorf("%s: %s watches %s:%s, not a Redis service", where, host, m[2], m[3])
		}
		if d := sentinelDownAfter.FindStringSubmatch(script); d == nil || !failoverWithinLease(t, d[1]) {
			t.Errorf("%s: %s: down-after-milliseconds %v: a failover must end before a worker's lease less a heartbeat lapses", where, host, d)
		}
		if !strings.Contains(script, `"sentinel auth-pass windlass $$REDIS_PASSWORD"`) || !strings.Contains(script, `"requirepass $$REDIS_PASSWORD"`) {
			t.Errorf("%s: %s does not use REDIS_PASSWORD for the master and itself", where, host)
		}
	}
}

// composeVar is a variable compose substitutes from deploy/.env.
var composeVar = regexp.MustCompile(`\$\{[^}]*\}`)

// checkComposeWindlass checks one windlass service's connections and ports.
func checkComposeWindlass(t *testing.T, where string, c composeFile, s composeService) {
	t.Helper()
	env := s.Environment
	var user string
	for u := range strings.SplitSeq(env["WINDLASS_NATS_URL"], ",") {
		pu, err := url.Parse(composeVar.ReplaceAllString(u, "pw")) // ${VAR} in the password
		if err != nil {
			t.Errorf("%s: WINDLASS_NATS_URL: %v", where, err)
			continue
		}
		user = pu.User.Username()
		if _, ok := c.Services[pu.Hostname()]; !ok || pu.Port() != "4222" {
			t.Errorf("%s: WINDLASS_NATS_URL names %s, not a NATS service's client port", where, pu.Host)
		}
	}
	if _, ok := deploy.Users()[user]; !ok {
		t.Errorf("%s: NATS user %q is not in accounts.conf", where, user)
	}
	if got := env["WINDLASS_NATS_INBOX_PREFIX"]; got != deploy.InboxPrefix(user) {
		t.Errorf("%s: WINDLASS_NATS_INBOX_PREFIX %q, want %q (the only inbox user %s may subscribe to)", where, got, deploy.InboxPrefix(user), user)
	}
	if strings.HasPrefix(user, "dispatcher-") && env["WINDLASS_DISPATCHER_ID"] != user {
		t.Errorf("%s: WINDLASS_DISPATCHER_ID %q, want %q (its results subject)", where, env["WINDLASS_DISPATCHER_ID"], user)
	}
	checkComposeRedisURL(t, where, c, env["WINDLASS_REDIS_URL"])
	if l, ok := env["WINDLASS_LISTEN"]; ok {
		p := portOf(t, where, l)
		if !slices.Contains(s.Ports, fmt.Sprintf("%d:%d", p, p)) {
			t.Errorf("%s: listens on %d but publishes %v", where, p, s.Ports)
		}
	}
	if s.Command[0] == "worker" {
		grace, err := time.ParseDuration(env["WINDLASS_SHUTDOWN_GRACE"])
		stop, err2 := time.ParseDuration(s.StopGracePeriod)
		if err != nil || err2 != nil || stop < grace+5*time.Second {
			t.Errorf("%s: stop_grace_period %q must exceed WINDLASS_SHUTDOWN_GRACE %q plus the 5s withdrawal", where, s.StopGracePeriod, env["WINDLASS_SHUTDOWN_GRACE"])
		}
	}
}

// TestDockerfile checks deploy/Dockerfile: multi-stage, a static build,
// a minimal final image, a non-root user, the binary as the entry point and
// the ports the manifests use exposed.
func TestDockerfile(t *testing.T) {
	var froms, runs []string
	var user, entry, copyTo string
	var exposed []string
	for line := range strings.SplitSeq(string(readFile(t, "Dockerfile")), "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			runs = append(runs, rest)
		case "USER":
			user = rest
		case "ENTRYPOINT":
			entry = rest
		case "COPY":
			if f := strings.Fields(rest); len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
				copyTo = f[2]
			}
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(rest)...)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(froms))
	}
	if final := froms[len(froms)-1]; !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("final image %q: want distroless static or scratch", final)
	}
	if !slices.ContainsFunc(runs, func(r string) bool {
		return strings.Contains(r, "CGO_ENABLED=0") && strings.Contains(r, "./cmd/windlass")
	}) {
		t.Error("no static (CGO_ENABLED=0) build of ./cmd/windlass")
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("USER %q: want a non-root user", user)
	}
	if entry != fmt.Sprintf("[%q]", copyTo) {
		t.Errorf("ENTRYPOINT %s is not the copied binary %s", entry, copyTo)
	}
	for _, p := range []string{"8090", "8081"} {
		if !slices.Contains(exposed, p) {
			t.Errorf("port %s not exposed", p)
		}
	}
}
