package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/demotools"
	"github.com/windlass-dev/windlass/worker"
)

// devIgnores are the flags dev shares with other commands and does not
// use, with why: its --help does not list them, and given on the command
// line they are refused rather than silently ignored. (Their environment
// variables are not: a shell set up for the client commands must still be
// able to start dev.)
var devIgnores = map[string]string{
	"nats-url":    "dev runs its own NATS server (choose its port with --nats-port)",
	"release-key": "dev signs releases with a key of its own, made at start",
}

// refuseIgnored refuses the flags of ignored given on the command line.
func refuseIgnored(fs *flag.FlagSet, ignored map[string]string) error {
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if why, ok := ignored[f.Name]; ok {
			errs = append(errs, fmt.Errorf("--%s is not used by %s: %s", f.Name, fs.Name(), why))
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: errors.Join(errs...)}
	}
	return nil
}

// devAPIListen is where dev serves its HTTP API when it may: the address
// the README's HTTP walk-through uses.
const devAPIListen = "127.0.0.1:8080"

// listenAPI listens on addr for the HTTP API; when addr is taken and
// fallback is set (the address was not asked for), on a free port of the
// same host instead: a second dev, or another server on 8080, does not
// stop the quick start, and the banner says where the API is.
func listenAPI(addr string, fallback bool) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil || !fallback {
		return ln, err
	}
	host, _, splitErr := net.SplitHostPort(addr)
	if splitErr != nil {
		return nil, err
	}
	return net.Listen("tcp", net.JoinHostPort(host, "0"))
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", "dev [flags]", stderr)
	c := commonFlags(fs)
	natsPort := intFlag(fs, "nats-port", -1, "port of the embedded NATS server (-1: a free port)")
	dataDir := stringFlag(fs, "data-dir", "", "JetStream storage directory (default: a temporary directory, removed on exit)")
	approvalListen := stringFlag(fs, "approval-listen", "127.0.0.1:0", "address of the approval service's API and dashboard (port 0: a free port)")
	apiListen := stringFlag(fs, "api-listen", devAPIListen, "address of the dispatcher's HTTP API, open without API keys (port 0: a free port; the default falls back to a free port when it is taken)")
	a := approvalFlags(fs)
	metricsListen := metricsFlag(fs)
	fs.Usage = usageFunc(fs, "dev [flags]", devIgnores)
	pos, err := parseCommandLine(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", fs.Name(), pos)}
	}
	if err := refuseIgnored(fs, devIgnores); err != nil { // before the environment sets them
		return err
	}
	if err := applyEnv(fs); err != nil {
		return err
	}
	if err := a.parse(); err != nil {
		return err
	}
	if err := checkNoDev(); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	stopTelemetry, err := startTelemetry(ctx, "windlass-dev", *metricsListen, log)
	if err != nil {
		return err
	}
	defer stopTelemetry()

	store := *dataDir
	if store == "" {
		tmp, err := os.MkdirTemp("", "windlass-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		store = tmp
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: *natsPort, JetStream: true, StoreDir: store, NoSigs: true, ServerName: "windlass-dev"})
	if err != nil {
		return fmt.Errorf("embedded NATS: %w", err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("embedded NATS did not start on port %d", *natsPort)
	}
	natsURL := ns.ClientURL()

	redisURL, redisNote := *c.redisURL, "(given)"
	if redisURL == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("in-process Redis: %w", err)
		}
		defer mr.Close()
		redisURL, redisNote = "redis://"+mr.Addr()+"/0", "(in-process, memory-only: the registry is lost on exit; pass --redis-url for a real Redis)"
	}
	*c.natsURL, *c.redisURL = natsURL, redisURL

	nc, rc, err := c.connect("dev")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer rc.Close()
	reg, err := c.registry(rc, log)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The approval service signs releases with a key made for this run;
	// the worker trusts its public half. One reviewer, "dev".
	privText, _, err := release.GenerateKey()
	if err != nil {
		return err
	}
	privKey, _ := release.ParsePrivateKey(privText)
	a.signer = release.NewSigner(privKey)
	pubKey, _ := release.ParsePublicKey(a.signer.PublicKey())
	devToken := approval.NewToken()
	a.extraReviewers = []approval.Reviewer{{Name: "dev", TokenSHA256: approval.HashToken(devToken)}}

	w, err := worker.New(worker.Config{JetStream: js, Registry: reg, ID: "dev-worker", Logger: log, ShutdownGrace: 5 * time.Second,
		Releases: release.NewVerifier(pubKey)})
	if err != nil {
		return err
	}
	for _, t := range demotools.All() {
		if err := w.Register(t); err != nil {
			return err
		}
	}
	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()
	defer func() { stopWorker(); <-workerDone }()

	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	defer d.Close()

	svc, closeHooks, err := a.service(nc, rc, reg, *c.prefix, log)
	if err != nil {
		return err
	}
	defer closeHooks()
	ln, err := net.Listen("tcp", *approvalListen)
	if err != nil {
		return fmt.Errorf("--approval-listen %s: %w", *approvalListen, err)
	}
	approvalURL := "http://" + ln.Addr().String()
	approvalCtx, stopApproval := context.WithCancel(context.WithoutCancel(ctx))
	approvalDone := make(chan error, 1)
	go func() { approvalDone <- serveApproval(approvalCtx, svc, ln) }()
	defer func() { stopApproval(); <-approvalDone }()

	// The dispatcher's HTTP API and its MCP server at /mcp, as `windlass
	// dispatcher` serves them; open: a dev fleet has no API keys.
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	mcpExtra, stopMCP, err := mountMCP(apiCtx, d, "/mcp", slog.New(slog.DiscardHandler))
	if err != nil {
		stopAPI()
		return err
	}
	defer stopMCP()
	api, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: nc, Logger: slog.New(slog.DiscardHandler), Extra: mcpExtra})
	if err != nil {
		stopAPI()
		return err
	}
	apiLn, err := listenAPI(*apiListen, !flagGiven(fs, "api-listen"))
	if err != nil {
		stopAPI()
		return fmt.Errorf("--api-listen %s: %w", *apiListen, err)
	}
	apiURL := "http://" + apiLn.Addr().String()
	apiDone := make(chan error, 1)
	go func() { apiDone <- serveAPI(apiCtx, api, apiLn, log) }()
	defer func() { stopAPI(); <-apiDone }()

	// Show it working: one call through the fleet before the banner.
	check, err := selfCheck(ctx, d)
	if err != nil {
		return fmt.Errorf("self-check: %w", err)
	}
	remove, err := claimDiscovery(discovery{NATSURL: natsURL, RedisURL: redisURL, ApprovalURL: approvalURL, APIURL: apiURL, ReviewerToken: devToken, PID: os.Getpid()})
	if err != nil {
		return err
	}
	defer remove()

	fmt.Fprintf(stdout, `Windlass dev fleet is running.
  NATS      %s (embedded, JetStream in %s)
  Redis     %s %s
  worker    %s serving echo, add, sleep, transfer_funds (requires approval), refund (over 100)
  approval  %s/ (dashboard; reviewer "dev", token %s)
  HTTP API  %s/v1/ (open: no API keys; OpenAPI at /v1/openapi.json)
  MCP       %s/mcp (streamable HTTP: point an MCP client here)
  check     add {"a":1,"b":2} -> %s
  found by  %s

From another terminal:
  go run ./cmd/windlass call add '{"a":1,"b":2}'
  go run ./cmd/windlass tools --style anthropic
  go run ./cmd/windlass status --watch      # the fleet at a glance
  curl -s -H 'Content-Type: application/json' -d '{"tool":"add","arguments":{"a":1,"b":2}}' %s/v1/calls
  export API=%s                # the README's HTTP walk-through and Python snippet use $API
  go run ./cmd/windlass call transfer_funds '{"to":"bob","amount":5}'   # waits for a human:
    approve it on the dashboard above, or from a third terminal:
    go run ./cmd/windlass approvals list
    go run ./cmd/windlass approvals approve CALL_ID

Press Ctrl-C to stop.
`, natsURL, store, redisURL, redisNote, w.ID(), approvalURL, devToken, apiURL, apiURL, check, discoveryPath(), apiURL, apiURL)

	select {
	case <-ctx.Done():
	case err := <-approvalDone:
		approvalDone <- err
		return fmt.Errorf("approval service stopped: %w", err)
	case err := <-apiDone:
		apiDone <- err
		return fmt.Errorf("HTTP API stopped: %w", err)
	case err := <-workerDone:
		workerDone <- err
		return fmt.Errorf("worker stopped: %w", err)
	}
	fmt.Fprintln(stdout, "Stopping.")
	return nil
}

// selfCheck waits for the worker to be visible and runs add(1, 2).
func selfCheck(ctx context.Context, d *dispatcher.Dispatcher) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, devReadyTimeout)
	defer cancel()
	for {
		r, err := d.Call(ctx, "add", map[string]int{"a": 1, "b": 2})
		if err == nil && !r.IsError {
			return r.Content, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("add(1, 2): %s", r.Content)
		}
		time.Sleep(50 * time.Millisecond) // the worker is still advertising
	}
}
