// Command windlass runs the parts of the Windlass fleet: one binary, one
// subcommand per role. Run `windlass help` for the list and
// `windlass <command> --help` for each command's flags; every flag has an
// environment variable fallback (WINDLASS_…).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"dev", "run the whole fleet in one process: embedded NATS, Redis (or in-memory), a dispatcher and demo tools", runDev},
		{"worker", "serve the demo tools against a NATS and a Redis", runWorker},
		{"dispatcher", "serve the fleet's HTTP API (tools, calls, events; OpenAPI at /v1/openapi.json); also: dispatcher apikey [NAME]", runDispatcher},
		{"call", "call a tool: windlass call TOOL JSON; prints the content (--async: prints the call id)", runCall},
		{"watch", "follow a call's events until it finishes, then print its result: watch ID", runWatch},
		{"status", "the fleet at a glance (workers, queues, in flight, held approvals; --watch), or where a call stands: status [ID]", runStatus},
		{"cancel", "cancel a queued, running or held call: cancel ID [--reason TEXT]", runCancel},
		{"dead", "calls the fleet gave up on: dead list [--tool NAME] | dead replay SEQ [--wait] | dead refusals (messages dropped unanswered)", runDead},
		{"tools", "list the fleet's live tools in a provider's format", runTools},
		{"approval", "run the approval service (HTTP API, dashboard, webhooks); also: approval keygen, approval token NAME", runApproval},
		{"approvals", "review held calls: approvals list | approve ID | reject ID --reason TEXT", runApprovals},
		{"receipt", "check a call's signed execution receipt against the published worker keys: receipt verify ID [--json]", runReceipt},
		{"bench", "measure the fleet beside raw NATS (closed and open loops, payloads, tools); --json", runBench},
	}
}

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// Unwrap returns the error the exit code is for.
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee *exitError
		code := 1
		if errors.As(err, &ee) {
			code = ee.code
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, errorLine(err))
		} else {
			code = 0
		}
		os.Exit(code)
	}
}

// errorLine is the line main prints for err: its text after one "windlass:"
// prefix, which the root package's errors already carry.
func errorLine(err error) string {
	return "windlass: " + strings.TrimPrefix(err.Error(), "windlass: ")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return &exitError{code: 2, err: errors.New("no command given")}
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return &exitError{code: 2, err: fmt.Errorf("unknown command %q", args[0])}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: windlass <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every flag falls back to an environment variable named after it: --nats-url")
	fmt.Fprintln(w, "is $WINDLASS_NATS_URL, --redis-url is $WINDLASS_REDIS_URL. Without either, commands")
	fmt.Fprintln(w, "find a running 'windlass dev' through its file ($WINDLASS_DEV_FILE); with no")
	fmt.Fprintln(w, "running dev they say so rather than guess at the standard local ports.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'windlass <command> --help' for a command's flags.")
}
