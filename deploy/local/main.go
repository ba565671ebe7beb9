// Command local runs the fleet's production topology on one machine: three
// NATS nodes clustered with JetStream (each its own process, with the
// accounts and per-role permissions of deploy/nats/accounts.conf), a Redis
// with an fsync after every write, the approval service and two workers as
// local processes of the windlass binary, each under its role's NATS user.
// The streams are created with three replicas.
//
//	go run ./deploy/local                 # until Ctrl-C; prints how to call the fleet
//	go run ./deploy/local -dir /tmp/wl    # keep the state (and find fleet.json there)
//	go run ./deploy/local -redis cluster  # Redis as a Cluster of three masters
//	go run ./deploy/local -redis sentinel # Redis as a master, a replica and three Sentinels
//
// It writes DIR/fleet.env (the environment of a dispatcher, for `windlass
// call`) and DIR/fleet.json (ports, passwords, process ids: what the
// integration test reads to kill the node leading the calls stream). A node
// that dies is reported, not restarted: restart it with
// `local node DIR/node-N.conf`.
//
// `local node FILE` runs one nats-server from a configuration file; the
// launcher runs its nodes that way.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/redisurl"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "node" {
		err = runNode(ctx, os.Args[2:])
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "local:", err)
		stop()
		os.Exit(1)
	}
}

// State is what fleet.json holds.
type State struct {
	Dir       string            `json:"dir"`
	Nodes     []Node            `json:"nodes"`
	RedisURL  string            `json:"redis_url"`
	Approval  string            `json:"approval_url"`
	Reviewer  string            `json:"reviewer_token"`
	Passwords map[string]string `json:"passwords"` // by NATS user
	Workers   []Proc            `json:"workers"`
	Services  []Proc            `json:"services"` // the approval service
	Ready     bool              `json:"ready"`
}

// Node is one NATS node.
type Node struct {
	Name        string `json:"name"`
	ClientPort  int    `json:"client_port"`
	ClusterPort int    `json:"cluster_port"`
	MonitorPort int    `json:"monitor_port"`
	Config      string `json:"config"`
	PID         int    `json:"pid"`
}

// Proc is a windlass process.
type Proc struct {
	Name       string `json:"name"`
	PID        int    `json:"pid"`
	HealthAddr string `json:"health_addr"`
	Log        string `json:"log"`
}

// URLs is the client URL list of the nodes for user, as --nats-url takes it.
func (s *State) URLs(user string) string {
	urls := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		urls[i] = fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, s.Passwords[user], n.ClientPort)
	}
	return strings.Join(urls, ",")
}

type options struct {
	dir, windlass, sync string
	redis               string // single, cluster or sentinel
	workers             int
	ackWait, grace      time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.dir, "dir", "", "state directory: configurations, JetStream stores, logs, fleet.json (default: a new temporary directory, removed on exit)")
	fs.StringVar(&o.windlass, "windlass", "", "the windlass binary (default: go build ./cmd/windlass into the state directory)")
	fs.StringVar(&o.sync, "sync", "always", "JetStream sync_interval of the nodes: always, or a duration (2m is the server default)")
	fs.StringVar(&o.redis, "redis", "single", "the Redis side: single (one server, appendfsync always), cluster (a Redis Cluster of three masters) or sentinel (a master, a replica and three Sentinels)")
	fs.IntVar(&o.workers, "workers", 2, "worker processes")
	fs.DurationVar(&o.ackWait, "worker-ack-wait", 30*time.Second, "the workers' --ack-wait")
	fs.DurationVar(&o.grace, "worker-shutdown-grace", 25*time.Second, "the workers' --shutdown-grace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, ok := redisKinds[o.redis]; !ok {
		return fmt.Errorf("-redis %q: use single, cluster or sentinel", o.redis)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if o.dir == "" {
		tmp, err := os.MkdirTemp("", "windlass-local-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		o.dir = tmp
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := &fleet{dir: dir, log: log, exited: make(chan string, 16)}
	defer f.stopAll()
	if err := f.start(ctx, o); err != nil {
		return err
	}
	fmt.Fprintf(stdout, `Windlass local cluster is running (state in %s).
  NATS      %s (3 nodes, JetStream, streams with 3 replicas, sync_interval %s)
  Redis     %s (%s)
  approval  %s/ (reviewer "local", token %s)
  workers   %d, serving the demo tools

Call it as dispatcher-a:
  set -a; . %s; set +a
  go run ./cmd/windlass call add '{"a":1,"b":2}'

Press Ctrl-C to stop.
`, dir, f.state.URLs("dispatcher-a"), o.sync, f.state.RedisURL, redisKinds[o.redis], f.state.Approval, f.state.Reviewer, o.workers, filepath.Join(dir, "fleet.env"))
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "Stopping.")
			return nil
		case name := <-f.exited:
			log.Warn("local: a process exited; not restarting it", "process", name)
		}
	}
}

// redisKinds are the values of -redis, each with what it runs.
var redisKinds = map[string]string{
	"single":   "one server, appendfsync always",
	"cluster":  "a Redis Cluster of three masters, memory only",
	"sentinel": "a master, a replica and three Sentinels, memory only",
}

// startRedis starts the Redis side as kind says and sets its URL in the
// state: every windlass process gets it as WINDLASS_REDIS_URL.
func (f *fleet) startRedis(kind string) error {
	switch kind {
	case "cluster":
		c, err := testserver.NewRedisCluster(3)
		if err != nil {
			return err
		}
		f.redis, f.state.RedisURL = c, c.URL()
	case "sentinel":
		s, err := testserver.NewRedisSentinel()
		if err != nil {
			return err
		}
		f.redis, f.state.RedisURL = s, s.URL()
	default:
		r, err := testserver.NewRedis(testserver.RedisOptions{Persist: true})
		if err != nil {
			return err
		}
		f.redis, f.state.RedisURL = r, r.URL()
	}
	return nil
}

// proc is a started process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited
}

// fleet is the running processes.
type fleet struct {
	dir    string
	log    *slog.Logger
	state  State
	redis  interface{ Close() }
	exited chan string // names of processes that exited on their own

	mu       sync.Mutex
	procs    []*proc // in start order: the nodes first
	stopping bool
	wg       sync.WaitGroup
}

func (f *fleet) start(ctx context.Context, o options) error {
	f.state = State{Dir: f.dir, Passwords: map[string]string{}}
	for user := range deploy.Users() {
		f.state.Passwords[user] = randomHex(16)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "accounts.conf"), deploy.NATSAccounts, 0o600); err != nil {
		return err
	}
	ports, err := freePorts(9 + 1 + 1 + o.workers)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for i := range 3 {
		n := Node{Name: fmt.Sprintf("node-%d", i+1), ClientPort: ports[3*i], ClusterPort: ports[3*i+1], MonitorPort: ports[3*i+2]}
		n.Config = filepath.Join(f.dir, n.Name+".conf")
		f.state.Nodes = append(f.state.Nodes, n)
	}
	for i := range f.state.Nodes {
		n := &f.state.Nodes[i]
		if err := os.WriteFile(n.Config, []byte(nodeConfig(f.state.Nodes, i, f.dir, o.sync)), 0o600); err != nil {
			return err
		}
		cmd := exec.Command(self, "node", n.Config)
		if n.PID, err = f.spawn(n.Name, cmd, f.natsEnv()); err != nil {
			return err
		}
	}
	admin, err := nats.Connect(f.state.URLs("admin"), nats.MaxReconnects(-1), nats.Timeout(time.Second))
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond) // the nodes are still starting
		admin, err = nats.Connect(f.state.URLs("admin"), nats.MaxReconnects(-1), nats.Timeout(time.Second))
	}
	if err != nil {
		return fmt.Errorf("connect to the cluster as admin: %w", err)
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	if err := f.poll(ctx, 60*time.Second, "JetStream meta leader elected", "", func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.AccountInfo(actx)
		return err == nil
	}); err != nil {
		return err
	}

	if err := f.startRedis(o.redis); err != nil {
		return err
	}

	bin := o.windlass
	if bin == "" {
		bin = filepath.Join(f.dir, "windlass")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/windlass")
		build.Dir = moduleRoot()
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/windlass: %w\n%s", err, out)
		}
	}
	priv, pub, err := release.GenerateKey()
	if err != nil {
		return err
	}
	f.state.Reviewer = approval.NewToken()
	next := 9
	listen := fmt.Sprintf("127.0.0.1:%d", ports[next])
	f.state.Approval = "http://" + listen
	health := fmt.Sprintf("127.0.0.1:%d", ports[next+1])
	next += 2
	env := append(f.roleEnv("approval"), "WINDLASS_RELEASE_KEY="+priv,
		"WINDLASS_REVIEWERS=local="+approval.HashToken(f.state.Reviewer),
		"WINDLASS_LISTEN="+listen, "WINDLASS_HEALTH_LISTEN="+health, "WINDLASS_REPLICAS=3")
	p := Proc{Name: "approval", HealthAddr: health, Log: filepath.Join(f.dir, "approval.log")}
	if p.PID, err = f.spawn(p.Name, exec.Command(bin, "approval"), env); err != nil {
		return err
	}
	f.state.Services = append(f.state.Services, p)
	if err := f.poll(ctx, 60*time.Second, "the approval service created the streams", "approval", func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for _, cfg := range layout.AllStreams(layout.StreamOptions{}) {
			if _, err := js.Stream(actx, cfg.Name); err != nil {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}

	for i := range o.workers {
		health := fmt.Sprintf("127.0.0.1:%d", ports[next+i])
		name := fmt.Sprintf("worker-%d", i+1)
		env := append(f.roleEnv("worker"), "WINDLASS_ID="+name, "WINDLASS_RELEASE_PUBLIC_KEYS="+pub,
			"WINDLASS_HEALTH_LISTEN="+health, "WINDLASS_REPLICAS=3",
			"WINDLASS_ACK_WAIT="+o.ackWait.String(), "WINDLASS_SHUTDOWN_GRACE="+o.grace.String())
		p := Proc{Name: name, HealthAddr: health, Log: filepath.Join(f.dir, name+".log")}
		if p.PID, err = f.spawn(name, exec.Command(bin, "worker"), env); err != nil {
			return err
		}
		f.state.Workers = append(f.state.Workers, p)
	}
	if err := f.waitWorkers(ctx); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(f.dir, "fleet.env"), []byte(strings.Join(append(f.roleEnv("dispatcher-a"), "WINDLASS_APPROVAL_URL="+f.state.Approval, "WINDLASS_TOKEN="+f.state.Reviewer), "\n")+"\n"), 0o600); err != nil {
		return err
	}
	f.state.Ready = true
	return f.writeState()
}

// waitWorkers waits until every worker advertises the demo tools.
func (f *fleet) waitWorkers(ctx context.Context) error {
	rc, err := redisurl.New(f.state.RedisURL)
	if err != nil {
		return err
	}
	defer rc.Close()
	reg, err := registry.New(registry.Config{Client: rc})
	if err != nil {
		return err
	}
	return f.poll(ctx, 60*time.Second, "the workers advertised their tools", "worker-1", func() bool {
		info, err := reg.Lookup(ctx, "add")
		return err == nil && len(info.LiveWorkers(time.Now())) == len(f.state.Workers)
	})
}

// roleEnv is the environment of a windlass process of a NATS user.
func (f *fleet) roleEnv(user string) []string {
	env := []string{"WINDLASS_NATS_URL=" + f.state.URLs(user), "WINDLASS_NATS_INBOX_PREFIX=" + deploy.InboxPrefix(user),
		"WINDLASS_REDIS_URL=" + f.state.RedisURL}
	if strings.HasPrefix(user, "dispatcher-") {
		env = append(env, "WINDLASS_DISPATCHER_ID="+user)
	}
	return env
}

// natsEnv is the nodes' environment: the users' passwords.
func (f *fleet) natsEnv() []string {
	var env []string
	for user, name := range deploy.Users() {
		env = append(env, name+"="+f.state.Passwords[user])
	}
	return env
}

// spawn starts cmd with its output in DIR/<name>.log and watches it.
func (f *fleet) spawn(name string, cmd *exec.Cmd, env []string) (int, error) {
	logf, err := os.OpenFile(filepath.Join(f.dir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(cleanEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	f.wg.Go(func() {
		_ = cmd.Wait()
		close(p.done)
		f.mu.Lock()
		stopping := f.stopping
		f.mu.Unlock()
		if !stopping {
			select {
			case f.exited <- name:
			default:
			}
		}
	})
	return cmd.Process.Pid, nil
}

// stopAll stops the services first (SIGTERM: workers drain while NATS is
// still up), then the NATS nodes, then Redis.
func (f *fleet) stopAll() {
	f.mu.Lock()
	f.stopping = true
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	nodes := min(3, len(procs))
	halt(procs[nodes:], 40*time.Second)
	halt(procs[:nodes], 20*time.Second)
	f.wg.Wait()
	if f.redis != nil {
		f.redis.Close()
	}
}

// halt sends SIGTERM to procs and waits for them, killing those still
// running after within.
func halt(procs []*proc, within time.Duration) {
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(within)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (f *fleet) writeState() error {
	b, _ := json.MarshalIndent(f.state, "", "  ")
	tmp := filepath.Join(f.dir, "fleet.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(f.dir, "fleet.json"))
}

// nodeConfig is node i's configuration: the cluster, JetStream with its own
// store and the chosen sync interval, and the fleet's accounts.
func nodeConfig(nodes []Node, i int, dir, sync string) string {
	n := nodes[i]
	var routes []string
	for _, o := range nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.ClusterPort))
	}
	if _, err := time.ParseDuration(sync); err != nil || sync == "always" {
		sync = strconv.Quote(sync)
	}
	return fmt.Sprintf(`# Written by deploy/local.
server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: %s
}
cluster {
  name: windlass-local
  listen: 127.0.0.1:%d
  routes: [%s]
}
include accounts.conf
`, n.Name, n.ClientPort, n.MonitorPort, filepath.Join(dir, n.Name), sync, n.ClusterPort, strings.Join(routes, ", "))
}

// runNode runs one nats-server from a configuration file until ctx ends.
func runNode(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New("usage: local node CONFIG_FILE")
	}
	opts, err := server.ProcessConfigFile(args[0])
	if err != nil {
		return fmt.Errorf("load %s: %w", args[0], err)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("configure nats-server: %w", err)
	}
	s.ConfigureLogger()
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return errors.New("nats-server not ready within 30s")
	}
	select {
	case <-ctx.Done():
		s.Shutdown()
	case <-shutdown(s):
	}
	s.WaitForShutdown()
	return nil
}

// shutdown is closed when s has shut down on its own.
func shutdown(s *server.Server) <-chan struct{} {
	ch := make(chan struct{})
	go func() { s.WaitForShutdown(); close(ch) }()
	return ch
}

// poll waits until cond holds, for at most within. A process that exits
// meanwhile (the cluster will not become ready without it) ends the wait at
// once with the end of its log; so does a wait that runs out, with the end
// of the log of the process it waits for (logOf, "" for none).
func (f *fleet) poll(ctx context.Context, within time.Duration, what, logOf string, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s%s", what, within, f.logTail(logOf))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case name := <-f.exited:
			return fmt.Errorf("%s: %s exited%s", what, name, f.logTail(name))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// logTail is the end of the named process's log, to quote in an error.
func (f *fleet) logTail(name string) string {
	if name == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(f.dir, name+".log"))
	if err != nil {
		return ""
	}
	const n = 2000
	return fmt.Sprintf("; the end of %s.log:\n%s", name, b[max(0, len(b)-n):])
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cleanEnv is this process's environment without WINDLASS_ variables, so
// each child gets exactly the configuration given to it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WINDLASS_") {
			env = append(env, kv)
		}
	}
	return env
}

// moduleRoot is the directory of go.mod, for go build.
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "."
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
