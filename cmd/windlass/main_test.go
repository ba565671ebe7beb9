package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBadInputExitsTwo runs commands with bad arguments: each is refused
// with exit code 2 and a message naming what is wrong, before connecting to
// anything (the URLs point nowhere).
func TestBadInputExitsTwo(t *testing.T) {
	t.Setenv("WINDLASS_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("WINDLASS_REDIS_URL", "redis://127.0.0.1:1/0")
	cases := []struct {
		name string
		args []string
		want string // in the error
	}{
		{"UnknownCommand", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"CancelMissingID", []string{"cancel"}, "cancel needs exactly one call ID"},
		{"CancelTwoIDs", []string{"cancel", "a", "b"}, "cancel needs exactly one call ID"},
		{"CancelInvalidID", []string{"cancel", "has space"}, "call ID"},
		{"WatchMissingID", []string{"watch"}, "watch needs exactly one call ID"},
		{"WatchInvalidID", []string{"watch", `q"uote`}, "call ID"},
		{"StatusTwoIDs", []string{"status", "a", "b", "--json"}, "status needs exactly one call ID"},
		{"StatusInvalidID", []string{"status", strings.Repeat("x", 1000)}, "call ID"},
		{"DeadNoAction", []string{"dead"}, "dead needs list or replay SEQ"},
		{"DeadUnknownAction", []string{"dead", "bury"}, `unknown action "bury"`},
		{"DeadListBadTool", []string{"dead", "list", "--tool", "no.dots"}, "--tool"},
		{"DeadListBadLimit", []string{"dead", "list", "--limit", "0"}, "--limit"},
		{"DeadReplayMissingSeq", []string{"dead", "replay"}, "SEQ"},
		{"DeadReplayBadSeq", []string{"dead", "replay", "seven"}, `SEQ "seven" must be a positive integer`},
		{"DeadReplayZeroSeq", []string{"dead", "replay", "0"}, `SEQ "0"`},
		{"CallInvalidID", []string{"call", "echo", "{}", "--id", "a b"}, "--id"},
		{"DispatcherUnknownArgument", []string{"dispatcher", "serve"}, `unknown argument "serve"`},
		{"DispatcherRawAPIKey", []string{"dispatcher", "--api-keys", "wlk_notahash"}, "sha256"},
		{"DispatcherMissingKeyFile", []string{"dispatcher", "--api-key-file", "/nonexistent/keys"}, "--api-key-file"},
		{"DispatcherAPIKeyTwoNames", []string{"dispatcher", "apikey", "a", "b"}, "usage"},
		{"RedisURLUnknownScheme", []string{"tools", "--redis-url", "http://127.0.0.1:1"}, `--redis-url ($WINDLASS_REDIS_URL) "http://127.0.0.1:1": unknown scheme "http"; want one of redis://`},
		{"RedisURLSentinelNoMaster", []string{"worker", "--redis-url", "redis+sentinel://:pw@127.0.0.1:1"}, `"redis+sentinel://:xxxxx@127.0.0.1:1": the sentinel form needs master_name=NAME`},
		{"RedisURLClusterDB", []string{"dispatcher", "--redis-url", "redis+cluster://127.0.0.1:1/2"}, "database 0 only"},
		{"BenchRedisURL", []string{"bench", "--redis-url", "redis://127.0.0.1:1?bogus=1"}, "unexpected option: bogus"},
		{"ToolsUnknownStyle", []string{"tools", "--style", "claude"}, `unknown schema style "claude": use ` + windlass.StyleChoices()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tc.args, &stdout, &stderr)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 {
				t.Fatalf("run(%q) = %v, want an exit code 2 error", tc.args, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

// TestToolsStyles checks the tools command's --style against the styles
// of the root package: its help names each and the default, and an unknown
// style is reported on a line with one "windlass:" prefix (it had two: the
// command's and the root package error's own).
func TestToolsStyles(t *testing.T) {
	t.Setenv("WINDLASS_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("WINDLASS_STYLE", "")
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"tools", "--help"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("tools --help = %v, want flag.ErrHelp", err)
	}
	help := stderr.String()
	for _, style := range windlass.Styles {
		if !strings.Contains(help, string(style)) {
			t.Errorf("tools --help does not name style %q:\n%s", style, help)
		}
	}
	if want := fmt.Sprintf("(default %q)", windlass.DefaultStyle); !strings.Contains(help, want) {
		t.Errorf("tools --help does not give the default %s:\n%s", want, help)
	}
	for _, style := range []string{"claude", "xml"} {
		err := run(t.Context(), []string{"tools", "--style", style}, &stdout, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Fatalf("tools --style %s = %v, want an exit code 2 error", style, err)
		}
		want := fmt.Sprintf("windlass: unknown schema style %q: use %s", style, windlass.StyleChoices())
		if got := errorLine(err); got != want {
			t.Errorf("tools --style %s prints %q, want %q", style, got, want)
		}
	}
	if got, want := errorLine(errors.New("dispatcher: closed")), "windlass: dispatcher: closed"; got != want {
		t.Errorf("errorLine = %q, want %q", got, want)
	}
}

// TestEventLine renders the events a watcher prints, one line each, with
// the fields each kind has.
func TestEventLine(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		event windlass.Event
		want  []string
	}{
		{windlass.Event{Kind: windlass.EventQueued, Tool: "sleep", Time: at}, []string{"queued", "tool=sleep"}},
		{windlass.Event{Kind: windlass.EventStarted, Tool: "sleep", Time: at, Attempt: 2, Worker: "w1"}, []string{"started", "attempt=2", "worker=w1"}},
		{windlass.Event{Kind: windlass.EventProgress, Time: at, Attempt: 1, Progress: &windlass.Progress{Fraction: 0.25, Message: "a quarter"}}, []string{"progress", "progress=25%", `message="a quarter"`}},
		{windlass.Event{Kind: windlass.EventRetrying, Time: at, Attempt: 1, Error: &windlass.CallError{Code: windlass.CodeToolError, Message: "flaky"}, RetryAt: at}, []string{"retrying", `error=tool_error: "flaky"`, "retry_at="}},
		{windlass.Event{Kind: windlass.EventFinished, Time: at, Result: &windlass.ToolResult{IsError: true, Error: &windlass.CallError{Code: windlass.CodeCanceled}}}, []string{"finished", "code=canceled"}},
		{windlass.Event{Kind: windlass.EventFinished, Time: at, Result: &windlass.ToolResult{Content: "ok", DurationMS: 1500}}, []string{"code=success", "duration=1.5s"}},
	}
	for _, tc := range cases {
		got := eventLine(tc.event)
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("eventLine(%s) = %q, lacks %q", tc.event.Kind, got, want)
			}
		}
	}
}

// TestDurationsPastTheLongest gives duration flags, and their environment
// variables, values that are no duration or past the longest one: each is
// refused, naming the flag or variable and the rule, never silently the
// default (a bad variable used to be ignored).
func TestDurationsPastTheLongest(t *testing.T) {
	t.Setenv("WINDLASS_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("WINDLASS_REDIS_URL", "redis://127.0.0.1:1/0")
	cases := []struct {
		name, env, value string
		args             []string
		want             []string // in the error
	}{
		{"EnvPastMax", "WINDLASS_TIMEOUT", "3000000h", []string{"call", "add", "{}"}, []string{`"WINDLASS_TIMEOUT"`, "3000000h", "at most 2562047h47m16.854775807s"}},
		{"EnvNotADuration", "WINDLASS_ACK_WAIT", "soon", []string{"worker"}, []string{`flag "ack-wait"`, `"WINDLASS_ACK_WAIT"`, `"soon"`, "30s"}},
		{"FlagPastMax", "", "", []string{"call", "add", "{}", "--timeout", "3000000h"}, []string{"-timeout", "at most 2562047h47m16.854775807s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(tc.env, tc.value)
			}
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tc.args, &stdout, &stderr)
			if err == nil {
				t.Fatalf("run(%q) with %s=%q succeeded", tc.args, tc.env, tc.value)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			var ee *exitError
			if tc.env != "" && (!errors.As(err, &ee) || ee.code != 2) {
				t.Errorf("run(%q) = %v; want a usage error, exit code 2", tc.args, err)
			}
		})
	}
}

// TestHelpNeverActs: --help (or -h) after a subcommand that takes no flags
// prints its usage and does nothing: `approval token --help` mints no
// token for a reviewer named "--help", `approval keygen --help` prints no
// key pair; a name that looks like a flag is refused.
func TestHelpNeverActs(t *testing.T) {
	for _, args := range [][]string{
		{"approval", "token", "--help"}, {"approval", "token", "-h"}, {"approval", "keygen", "--help"}, {"approval", "keygen", "-help"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q = %v, want flag.ErrHelp", args, err)
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, "wlr_") || strings.Contains(out, "ed25519:") || !strings.Contains(out, "usage") {
			t.Errorf("%q printed %q; want its usage and no token or key", args, out)
		}
	}
	for _, args := range [][]string{{"approval", "token", "--name"}, {"approval", "keygen", "extra"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || stdout.Len() > 0 {
			t.Errorf("%q = %v, stdout %q; want a usage error (exit 2) and nothing minted", args, err, stdout.String())
		}
	}
}

// TestBadEnvironmentValuesAreRefused: a flag's environment variable whose
// value does not parse is refused, naming the variable, the value and the
// form wanted — never silently replaced by the default.
func TestBadEnvironmentValuesAreRefused(t *testing.T) {
	t.Setenv("WINDLASS_NATS_URL", "nats://127.0.0.1:1")
	for _, tc := range []struct{ variable, value, want string }{
		{"WINDLASS_REPLICAS", "three", "whole number"},
		{"WINDLASS_JSON", "yes please", "true or false"},
		{"WINDLASS_TIMEOUT", "30", "duration"},
	} {
		t.Run(tc.variable, func(t *testing.T) {
			t.Setenv(tc.variable, tc.value)
			args := []string{"call", "add", `{"a":1,"b":2}`}
			if tc.variable == "WINDLASS_REPLICAS" {
				args = []string{"approval"}
			}
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), args, &stdout, &stderr)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), strconv.Quote(tc.variable)) || !strings.Contains(err.Error(), strconv.Quote(tc.value)) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s=%q: %v; want a usage error naming the variable, the value and %q", tc.variable, tc.value, err, tc.want)
			}
		})
	}
}

// TestDevRefusesFlagsItIgnores: dev runs its own NATS server and signs
// with its own key, so --nats-url and --release-key given to it are
// refused, naming why, before anything starts; their variables in the
// environment (set for the client commands) are not.
func TestDevRefusesFlagsItIgnores(t *testing.T) {
	for _, args := range [][]string{{"dev", "--nats-url", "nats://127.0.0.1:4222"}, {"dev", "--release-key", "ed25519:x"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "not used by dev") {
			t.Errorf("%q = %v; want a usage error saying dev does not use the flag", args, err)
		}
	}
}

// TestDevHelpOffersNoIgnoredFlag: dev --help lists its own flags and
// those it shares and uses, but not --nats-url and --release-key, which it
// refuses (a flag a command ignores is not offered).
func TestDevHelpOffersNoIgnoredFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"dev", "--nats-port", "4333", "--help"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("dev --help = %v, want flag.ErrHelp", err)
	}
	help := stderr.String()
	for name := range devIgnores {
		if strings.Contains(help, "-"+name+" ") || strings.Contains(help, "-"+name+"\n") {
			t.Errorf("dev --help offers --%s, which dev refuses:\n%s", name, help)
		}
	}
	for _, want := range []string{"-nats-port", "(default -1)", "-redis-url", "-approval-listen", "Usage: windlass dev"} {
		if !strings.Contains(help, want) {
			t.Errorf("dev --help lacks %q:\n%s", want, help)
		}
	}
}

// TestBadLimitsAreRefusedAtStart: a dispatcher given limits that break a
// rule exits 2 before it connects to anything, naming the entry (the
// file's path to it, or the flag) and the rule.
func TestBadLimitsAreRefusedAtStart(t *testing.T) {
	t.Setenv("WINDLASS_NATS_URL", "nats://127.0.0.1:1")
	bad := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  pay:\n    keys:\n      acme: {rate: 10/fortnight}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dispatcher", "--limits", bad}, "tools.pay.keys.acme.rate"},
		{[]string{"dispatcher", "--key-rate", "fast"}, "--key-rate"},
		{[]string{"dispatcher", "--key-max-in-flight", "-7"}, "--key-max-in-flight -7"},
		{[]string{"dispatcher", "--no-limits", "--limits", bad}, "pick one"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), tc.args, &stdout, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want a usage error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestStatusTableShowsLimits: the fleet table shows a tool's calls in
// flight over its cap, each key's over its cap with its rate, and the
// tool's execution rate.
func TestStatusTableShowsLimits(t *testing.T) {
	var b bytes.Buffer
	printFleet(&b, dispatcher.FleetStatus{Tools: []dispatcher.ToolStatus{{Tool: "pay", LiveWorkers: []string{"w1"}, ExecutionRate: "5/s",
		Limits: &dispatcher.ToolLimitsStatus{MaxQueued: 100, InFlight: 3, Keys: map[string]dispatcher.KeyLimitStatus{
			"acme": {Rate: "10/s", MaxInFlight: 5, InFlight: 3}, "default": {Rate: "none", MaxInFlight: -1}}}}}})
	for _, want := range []string{"3/100 start 5/s", "acme 3/5 10/s, default 0/∞"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestEnvironmentFallsBackFlagWins: a flag not given takes its environment
// variable's value, a flag given wins over it (and its variable is then not
// read at all, so a bad value there is no error), and flags may follow the
// positional arguments.
func TestEnvironmentFallsBackFlagWins(t *testing.T) {
	parse := func(args ...string) (int, time.Duration, []string, error) {
		fs := newFlags("t", "t", io.Discard)
		n := intFlag(fs, "replicas", 1, "")
		d := durationFlag(fs, "ack-wait", time.Second, "")
		pos, err := parseArgs(fs, args)
		return *n, *d, pos, err
	}
	t.Setenv("WINDLASS_REPLICAS", "3")
	t.Setenv("WINDLASS_ACK_WAIT", "soon")
	if n, d, pos, err := parse("x", "--ack-wait", "2s", "y"); err != nil || n != 3 || d != 2*time.Second || !slices.Equal(pos, []string{"x", "y"}) {
		t.Errorf("replicas from the environment, ack wait given: %d, %s, %q, %v; want 3, 2s, [x y], no error", n, d, pos, err)
	}
	if n, _, _, err := parse("--replicas", "5", "--ack-wait", "1m"); err != nil || n != 5 {
		t.Errorf("replicas given over its variable: %d, %v; want 5", n, err)
	}
	if _, _, _, err := parse(); err == nil || !strings.Contains(err.Error(), "WINDLASS_ACK_WAIT") {
		t.Errorf("ack wait from a bad variable: %v; want an error naming it", err)
	}
}
