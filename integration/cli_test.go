package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/demotools"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// The README's quick start as a new user runs it, with real processes: the
// built windlass binary runs `dev` in one process and `call`/`tools` from
// others, which find it only through the discovery file.

// TestCLIQuickStart builds the binary, starts `windlass dev`, runs the
// README's commands against it from separate processes, then stops dev with
// Ctrl-C (SIGINT).
func TestCLIQuickStart(t *testing.T) {
	bin := cliBuild(t)
	devFile := filepath.Join(t.TempDir(), "windlass", "dev.json")
	tmp := t.TempDir() // dev's default JetStream directory goes here
	env := append(cliEnv(devFile), "TMPDIR="+tmp)

	dev := cliStartDev(t, bin, env)
	dev.waitStdout(t, 90*time.Second, "banner and self-check", func(out string) bool {
		return strings.Contains(out, "Windlass dev fleet is running.") && cliHasLine(out, "check", "-> 3")
	})

	// The discovery file names dev's own servers, not the standard ports
	// (which system servers hold on this machine).
	var disc struct {
		NATSURL  string `json:"nats_url"`
		RedisURL string `json:"redis_url"`
		PID      int    `json:"pid"`
	}
	b, err := os.ReadFile(devFile)
	if err != nil {
		t.Fatalf("dev's discovery file: %v\ndev stdout:\n%s", err, dev.stdout.String())
	}
	if err := json.Unmarshal(b, &disc); err != nil {
		t.Fatalf("discovery file %s: %v", b, err)
	}
	if disc.PID != dev.cmd.Process.Pid {
		t.Errorf("discovery file pid = %d, dev's pid is %d", disc.PID, dev.cmd.Process.Pid)
	}
	for _, u := range []struct{ raw, standard string }{{disc.NATSURL, "4222"}, {disc.RedisURL, "6379"}} {
		parsed, err := url.Parse(u.raw)
		if err != nil || parsed.Port() == "" {
			t.Fatalf("discovery file URL %q: no port (%v)", u.raw, err)
		}
		if parsed.Port() == u.standard {
			t.Errorf("dev listens on the standard port %s (%s), which a system server already holds", u.standard, u.raw)
		}
	}

	// Arguments too large for a command line, from a file: 3 MiB, over
	// the server's max payload, by reference in the fleet, and back.
	t.Run("LargeArgumentsFromAFile", func(t *testing.T) {
		text := strings.Repeat("large ", 512<<10)
		file := filepath.Join(t.TempDir(), "args.json")
		data, _ := json.Marshal(map[string]string{"text": text})
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r := cliRun(t, bin, env, "call", "echo", "@"+file)
		if r.code != 0 || r.stdout != text+"\n" {
			t.Fatalf("windlass call echo @%s: exit %d, %d bytes out (%.200s); want the %d-byte text back", file, r.code, len(r.stdout), r.stderr, len(text))
		}
	})

	// A second dev on the same discovery file is refused before it starts
	// anything, naming the first; the first keeps its file and its fleet.
	t.Run("SecondDevIsRefused", func(t *testing.T) {
		r := cliRun(t, bin, env, "dev")
		if r.code != 1 || !strings.Contains(r.stderr, "another `windlass dev`") || !strings.Contains(r.stderr, strconv.Itoa(dev.cmd.Process.Pid)) {
			t.Errorf("second windlass dev: %s; want exit 1 naming the running dev (pid %d)", r, dev.cmd.Process.Pid)
		}
		b, err := os.ReadFile(devFile)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"pid": %d`, dev.cmd.Process.Pid)) {
			t.Errorf("discovery file after the second dev: %s (%v); want the first dev's", b, err)
		}
	})

	// The quick start's second terminal: no flags, no URL environment.
	t.Run("QuickStartAdd", func(t *testing.T) {
		r := cliRun(t, bin, env, `call`, `add`, `{"a":1,"b":2}`)
		if r.code != 0 || r.stdout != "3\n" {
			t.Fatalf("windlass call add: %s; want exit 0 and stdout %q", r, "3\n")
		}
	})

	cases := []struct {
		name string
		args []string
		// code is the exit code wanted; -1 means any non-zero code.
		code int
		// inStderr must all appear in stderr; inOutput in stdout+stderr.
		inStderr, inOutput []string
		stdout             func(t *testing.T, stdout string)
		within             time.Duration // 0: no bound beyond cliRun's
	}{
		{
			name:     "InvalidArguments",
			args:     []string{"call", "add", `{"a":"x","b":1}`},
			code:     -1,
			inStderr: []string{"invalid_arguments", "$.a"},
		},
		{
			name:     "UnknownTool",
			args:     []string{"call", "nope"},
			code:     -1,
			inStderr: []string{"unknown_tool"},
		},
		{
			name: "EchoJSONFlagAfterPositionals",
			args: []string{"call", "echo", `{"text":"hi"}`, "--json"},
			code: 0,
			stdout: func(t *testing.T, stdout string) {
				var res struct {
					Content string `json:"content"`
					IsError bool   `json:"is_error"`
				}
				if err := json.Unmarshal([]byte(stdout), &res); err != nil {
					t.Fatalf("stdout is not a JSON result: %v\n%s", err, stdout)
				}
				if res.Content != "hi" || res.IsError {
					t.Errorf("result content %q, is_error %v; want \"hi\", false", res.Content, res.IsError)
				}
			},
		},
		{
			name: "CallWithoutTool",
			args: []string{"call"},
			code: 2,
		},
		{
			name: "ToolsAnthropic",
			args: []string{"tools", "--style", "anthropic"},
			code: 0,
			stdout: func(t *testing.T, stdout string) {
				var tools []struct {
					Name        string          `json:"name"`
					InputSchema json.RawMessage `json:"input_schema"`
				}
				if err := json.Unmarshal([]byte(stdout), &tools); err != nil {
					t.Fatalf("stdout is not a JSON array of tools: %v\n%s", err, stdout)
				}
				var names []string
				for _, tool := range tools {
					names = append(names, tool.Name)
					if len(tool.InputSchema) == 0 {
						t.Errorf("tool %q has no input_schema (anthropic style)", tool.Name)
					}
				}
				for _, want := range []string{"echo", "add", "sleep", "transfer_funds"} {
					if !slices.Contains(names, want) {
						t.Errorf("tools --style anthropic lists %q, missing %q", names, want)
					}
				}
			},
		},
		{
			name:     "ToolsUnknownStyle",
			args:     []string{"tools", "--style", "xml"},
			code:     -1,
			inStderr: []string{"openai", "anthropic", "gemini"},
		},
		{
			name:     "SleepTimeout",
			args:     []string{"call", "sleep", `{"seconds":5}`, "--timeout", "500ms"},
			code:     -1,
			inStderr: []string{"timeout"},
			within:   4 * time.Second, // well before the 5 s sleep would end
		},
		{
			name:     "Help",
			args:     []string{"--help"},
			code:     0,
			inOutput: []string{"WINDLASS_NATS_URL"},
		},
		{
			name:     "CallHelp",
			args:     []string{"call", "--help"},
			code:     0,
			inOutput: []string{"WINDLASS_NATS_URL"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := cliRun(t, bin, env, tc.args...)
			switch {
			case tc.code == -1 && r.code == 0:
				t.Errorf("exit code 0, want non-zero")
			case tc.code != -1 && r.code != tc.code:
				t.Errorf("exit code %d, want %d", r.code, tc.code)
			}
			for _, s := range tc.inStderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q", s)
				}
			}
			for _, s := range tc.inOutput {
				if !strings.Contains(r.stdout+r.stderr, s) {
					t.Errorf("output (stdout and stderr) lacks %q", s)
				}
			}
			if tc.within > 0 && r.took > tc.within {
				t.Errorf("took %s, want at most %s", r.took.Round(time.Millisecond), tc.within)
			}
			if tc.stdout != nil && !t.Failed() {
				tc.stdout(t, r.stdout)
			}
			if t.Failed() {
				t.Logf("windlass %s: %s", strings.Join(tc.args, " "), r)
			}
		})
	}

	// The gated demo tool: the call waits for a human, who approves it from
	// a third terminal; the waiting call then prints the tool's result.
	t.Run("GatedCallApprovedFromTheCLI", func(t *testing.T) {
		results := make(chan cliResult, 1)
		go func() { results <- cliRun(t, bin, env, "call", "transfer_funds", `{"to":"bob","amount":5}`) }()
		var id string
		deadline := time.Now().Add(20 * time.Second)
		for id == "" {
			r := cliRun(t, bin, env, "approvals", "list", "--json")
			var out struct {
				Items []struct {
					ID, Tool string
				} `json:"items"`
			}
			if r.code == 0 && json.Unmarshal([]byte(r.stdout), &out) == nil && len(out.Items) > 0 && out.Items[0].Tool == "transfer_funds" {
				id = out.Items[0].ID
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the gated call never showed as held: %s", r)
			}
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case r := <-results:
			t.Fatalf("the gated call returned before anyone approved it: %s", r)
		default:
		}
		if r := cliRun(t, bin, env, "approvals", "approve", id); r.code != 0 || !strings.Contains(r.stdout, "approved") {
			t.Fatalf("approvals approve: %s", r)
		}
		r := <-results
		if r.code != 0 || !strings.HasPrefix(r.stdout, "sent 5.00 EUR to bob") {
			t.Errorf("the approved call: %s", r)
		}
		if !strings.Contains(r.stderr, "call "+id+" to transfer_funds needs approval; waiting") {
			t.Errorf("the waiting call's stderr %q does not say it waits for approval, with its id", r.stderr)
		}
		if r := cliRun(t, bin, env, "approvals", "reject", id, "--reason", "too late"); r.code == 0 || !strings.Contains(r.stderr, "409") {
			t.Errorf("a second decision: %s; want a 409 refusal", r)
		}
	})

	// A held call canceled from the shell: the approval service marks it
	// canceled, and approving it afterwards is refused.
	t.Run("HeldCallCanceledFromTheCLI", func(t *testing.T) {
		r := cliRun(t, bin, env, "call", "transfer_funds", `{"to":"carol","amount":7}`, "--async")
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || id == "" {
			t.Fatalf("call --async transfer_funds: %s", r)
		}
		listed := func(status string) bool {
			r := cliRun(t, bin, env, "approvals", "list", "--status", status, "--json")
			var out struct {
				Items []struct{ ID string } `json:"items"`
			}
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
				return false
			}
			return slices.ContainsFunc(out.Items, func(it struct{ ID string }) bool { return it.ID == id })
		}
		fleettest.WaitFor(t, 20*time.Second, "the gated call held pending", func() bool { return listed("pending") })
		if r := cliRun(t, bin, env, "cancel", id, "--reason", "wrong account"); r.code != 0 {
			t.Fatalf("cancel of the held call: %s", r)
		}
		fleettest.WaitFor(t, 20*time.Second, "the held call listed as canceled", func() bool { return listed("canceled") })
		if listed("pending") {
			t.Error("the canceled call is still listed pending")
		}
		if r := cliRun(t, bin, env, "approvals", "list", "--status", "canceled"); r.code != 0 || !cliHasLine(r.stdout, id, "canceled") || cliHasLine(r.stdout, id, " 0s ") {
			t.Errorf("approvals list of the canceled call: %s; want its row, with no time left shown", r)
		}
		if r := cliRun(t, bin, env, "approvals", "reject", id); r.code != 2 || !strings.Contains(r.stderr, "--reason") {
			t.Errorf("approvals reject without --reason: %s; want a usage error naming --reason", r)
		}
		if r := cliRun(t, bin, env, "approvals", "approve", id); r.code == 0 || !strings.Contains(r.stderr, "409") {
			t.Errorf("approving the canceled call: %s; want a 409 refusal", r)
		}
		if r := cliRun(t, bin, env, "status", id); r.code != 0 || !cliHasLine(r.stdout, "code:", "canceled") || !cliHasLine(r.stdout, "result:", "wrong account") {
			t.Errorf("status of the canceled held call: %s", r)
		}
	})

	// Ctrl-C: dev exits 0 within 15 s and removes its discovery file.
	dev.interrupt(t, 15*time.Second)
	if _, err := os.Stat(devFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("discovery file %s still there after dev exited (stat: %v)", devFile, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("dev left %d entries in its TMPDIR after exiting, e.g. %s", len(left), left[0].Name())
	}
	if out := dev.stdout.String(); !strings.Contains(out, "Stopping.") {
		t.Errorf("dev's stdout lacks \"Stopping.\":\n%s", out)
	}

	// With no running dev and no URLs a client says so and stops, rather
	// than try the standard ports (where this machine has servers of its
	// own): first with no discovery file, then with one whose dev is gone.
	for _, stale := range []bool{false, true} {
		if stale {
			if err := os.WriteFile(devFile, b, 0o600); err != nil { // the file dev wrote, naming its pid
				t.Fatal(err)
			}
		}
		r := cliRun(t, bin, env, "call", "add", `{"a":1,"b":2}`)
		want := "no `windlass dev` is running"
		if stale {
			want = fmt.Sprintf("names process %d, which has exited", dev.cmd.Process.Pid)
		}
		if r.code != 2 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "--nats-url") {
			t.Errorf("windlass call with no running dev (stale file: %v): %s; want exit 2 saying %q and naming --nats-url", stale, r, want)
		}
	}
}

// TestCLICallLifecycle drives a call's life from the shell against a fleet
// of real servers (testserver NATS and Redis, a worker in the test serving
// sleep and a flaky tool): call --async, watch, status, cancel, and a call
// whose retries ran out listed by dead list and answered after dead replay.
func TestCLICallLifecycle(t *testing.T) {
	bin := cliBuild(t)
	f := newFleet(t)
	var broken atomic.Bool
	broken.Store(true)
	flaky := windlass.MustFunc("flaky", func(ctx context.Context, _ struct{}) (string, error) {
		if broken.Load() {
			return "", windlass.Retryable(errors.New("downstream unavailable"))
		}
		return "fixed", nil
	})
	// Two deliveries: one attempt and one retry (after about 1 s), then the
	// call is dead.
	f.StartWorker(worker.Config{MaxDeliver: 2}, demotools.Sleep(), flaky)
	env := append(cliEnv(filepath.Join(t.TempDir(), "no-dev.json")),
		"WINDLASS_NATS_URL="+f.NATS.URL(), "WINDLASS_REDIS_URL="+f.Redis.URL())
	run := func(t *testing.T, args ...string) cliResult {
		t.Helper()
		r := cliRun(t, bin, env, args...)
		t.Logf("windlass %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		return r
	}

	t.Run("CancelARunningCall", func(t *testing.T) {
		const id = "cli-sleep-1"
		r := run(t, "call", "sleep", `{"seconds":120}`, "--async", "--id", id)
		if r.code != 0 || strings.TrimSpace(r.stdout) != id {
			t.Fatalf("call --async --id: %s; want exit 0 and the id on stdout", r)
		}
		// Watch from another process while the call runs; it ends when the
		// call has its result.
		watched := make(chan cliResult, 1)
		go func() { watched <- cliRun(t, bin, env, "watch", id, "--json", "--timeout", "50s") }()
		textWatch := make(chan cliResult, 1)
		go func() { textWatch <- cliRun(t, bin, env, "watch", id, "--timeout", "50s") }()

		// Running, as status sees it.
		var st struct {
			State, Tool, Worker string
			Attempt             int
			Result              *struct {
				Error *struct{ Code string } `json:"error"`
			}
		}
		fleettest.WaitFor(t, 30*time.Second, "status shows the sleep call running", func() bool {
			r := cliRun(t, bin, env, "status", id, "--json")
			return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && st.State == "running"
		})
		if st.Tool != "sleep" || st.Attempt != 1 || st.Worker == "" {
			t.Errorf("status of the running call = %+v; want tool sleep, attempt 1, a worker", st)
		}
		select {
		case r := <-watched:
			t.Fatalf("watch ended while the call runs: %s", r)
		default:
		}

		if r := run(t, "cancel", id, "--reason", "no longer needed"); r.code != 0 || !strings.Contains(r.stdout, "canceled "+id) {
			t.Fatalf("cancel: %s; want exit 0", r)
		}

		// watch --json: queued, started, then finished with the canceled result.
		r = <-watched
		var kinds []string
		var last struct {
			Kind, Tool string
			Result     *struct {
				Content string
				Error   *struct{ Code string } `json:"error"`
			}
		}
		for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
			if err := json.Unmarshal([]byte(line), &last); err != nil {
				t.Fatalf("watch --json line %q: %v", line, err)
			}
			kinds = append(kinds, last.Kind)
		}
		if got := strings.Join(kinds, ","); got != "queued,started,finished" {
			t.Errorf("watch --json kinds = %s; want queued,started,finished\n%s", got, r)
		}
		if last.Result == nil || last.Result.Error == nil || last.Result.Error.Code != "canceled" || !strings.Contains(last.Result.Content, "no longer needed") {
			t.Errorf("watch --json finished line = %+v; want the canceled result with the reason", last)
		}
		if r.code != 1 {
			t.Errorf("watch of a canceled call exited %d; want 1 (an error result)", r.code)
		}
		t.Logf("windlass watch %s --json:\n%s", id, r.stdout)
		r = <-textWatch
		t.Logf("windlass watch %s: exit %d\n%s%s", id, r.code, r.stdout, r.stderr)
		for _, want := range []string{"queued", "tool=sleep", "started", "attempt=1", "worker=", "finished", "code=canceled"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("watch (text) lacks %q:\n%s", want, r)
			}
		}
		if !strings.Contains(r.stderr, "canceled") || !strings.Contains(r.stderr, "no longer needed") {
			t.Errorf("watch (text) does not report the canceled result on stderr:\n%s", r)
		}

		// status: finished, code canceled, in text and JSON.
		r = run(t, "status", id)
		if r.code != 0 || !cliHasLine(r.stdout, "state:", "finished") || !cliHasLine(r.stdout, "code:", "canceled") || !cliHasLine(r.stdout, "tool:", "sleep") {
			t.Errorf("status: %s; want state finished and code canceled", r)
		}
		r = run(t, "status", id, "--json")
		st.Result = nil
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.State != "finished" || st.Result == nil || st.Result.Error == nil || st.Result.Error.Code != "canceled" {
			t.Errorf("status --json = %+v (%v); want finished with code canceled\n%s", st, err, r)
		}

		// Canceling again: already finished, its code named.
		if r := run(t, "cancel", id); r.code == 0 || !strings.Contains(r.stderr, "already finished") || !strings.Contains(r.stderr, "canceled") {
			t.Errorf("second cancel: %s; want non-zero and the result code", r)
		}
		// An id the fleet never saw.
		if r := run(t, "cancel", "never-submitted"); r.code != 1 || !strings.Contains(r.stderr, "no record") {
			t.Errorf("cancel of an unknown id: %s; want exit 1 and no record", r)
		}
		if r := run(t, "status", "never-submitted"); r.code != 1 || !cliHasLine(r.stdout, "state:", "unknown") {
			t.Errorf("status of an unknown id: %s; want exit 1 and state unknown", r)
		}
	})

	t.Run("DeadListAndReplay", func(t *testing.T) {
		r := run(t, "call", "flaky", "{}", "--async")
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || id == "" {
			t.Fatalf("call --async flaky: %s", r)
		}
		type dead struct {
			Seq        uint64
			Call       struct{ ID, Name string }
			Error      struct{ Code, Message string }
			Deliveries int
		}
		var list []dead
		fleettest.WaitFor(t, 30*time.Second, "dead list shows the flaky call", func() bool {
			r := cliRun(t, bin, env, "dead", "list", "--tool", "flaky", "--json")
			return r.code == 0 && json.Unmarshal([]byte(r.stdout), &list) == nil && len(list) == 1
		})
		dc := list[0]
		if dc.Call.ID != id || dc.Call.Name != "flaky" || dc.Deliveries != 2 || dc.Error.Code != "tool_error" || !strings.Contains(dc.Error.Message, "downstream unavailable") || dc.Seq == 0 {
			t.Errorf("dead call = %+v; want %s of flaky, 2 deliveries, tool_error", dc, id)
		}
		// The table, and the filter: no dead call of sleep.
		r = run(t, "dead", "list")
		if r.code != 0 || !cliHasLine(r.stdout, "SEQ", "DIED AT") || !cliHasLine(r.stdout, fmt.Sprint(dc.Seq), id) || !strings.Contains(r.stdout, "tool_error: Error: downstream unavailable") {
			t.Errorf("dead list (table): %s", r)
		}
		if r := run(t, "dead", "list", "--tool", "sleep", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("dead list --tool sleep: %s; want []", r)
		}

		broken.Store(false)
		r = run(t, "dead", "replay", fmt.Sprint(dc.Seq), "--wait", "--timeout", "40s")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 2 || lines[0] == id || lines[0] == "" || lines[1] != "fixed" {
			t.Fatalf("dead replay --wait: %s; want a new call id, then fixed", r)
		}
		if r := run(t, "status", lines[0]); r.code != 0 || !cliHasLine(r.stdout, "code:", "success") || !cliHasLine(r.stdout, "result:", "fixed") {
			t.Errorf("status of the replayed call: %s", r)
		}
		if r := run(t, "dead", "list", "--tool", "flaky", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("dead list after the replay: %s; want [] (replayed once)", r)
		}
		if r := run(t, "dead", "replay", fmt.Sprint(dc.Seq)); r.code != 1 || !strings.Contains(r.stderr, "no dead call") {
			t.Errorf("second replay: %s; want exit 1, no dead call", r)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"frobnicate"}, `unknown command "frobnicate"`},
			{[]string{"cancel"}, "call ID"},
			{[]string{"watch"}, "call ID"},
			{[]string{"status", "a", "b"}, "call ID"},
			{[]string{"cancel", "bad id"}, "call ID"},
			{[]string{"status", `a"b`}, "call ID"},
			{[]string{"dead", "replay", "x"}, "SEQ"},
			{[]string{"dead", "exhume"}, `unknown action "exhume"`},
		} {
			r := run(t, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("windlass %q: %s; want exit 2 and %q on stderr", tc.args, r, tc.want)
			}
		}
	})
}

// cliBuild builds cmd/windlass once per test into a temporary directory.
func cliBuild(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	root := cliModuleRoot(t)
	bin := filepath.Join(t.TempDir(), "windlass")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./cmd/windlass")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/windlass: %v\n%s", err, out)
	}
	return bin
}

// cliModuleRoot walks up from the working directory (integration/) to the
// directory holding go.mod.
func cliModuleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// cliEnv is the test process's environment without any WINDLASS_ variable
// (no URLs, no --json or --timeout defaults from the user's shell) or TMPDIR,
// with WINDLASS_DEV_FILE pointing at devFile.
func cliEnv(devFile string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "WINDLASS_") || strings.HasPrefix(kv, "TMPDIR=")
	})
	return append(env, "WINDLASS_DEV_FILE="+devFile)
}

// cliBuffer is an io.Writer safe to read while a child process writes it.
type cliBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *cliBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *cliBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cliDev is a running `windlass dev` child process.
type cliDev struct {
	cmd            *exec.Cmd
	stdout, stderr *cliBuffer
	done           chan struct{} // closed when Wait returned; err is then set
	err            error
}

// cliStartDev starts `windlass dev`; the test's cleanup kills it if it is
// still running and waits for it, so no process outlives the test.
func cliStartDev(t *testing.T, bin string, env []string) *cliDev {
	t.Helper()
	d := &cliDev{stdout: &cliBuffer{}, stderr: &cliBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, "dev")
	d.cmd.Env = env
	d.cmd.Dir = t.TempDir()
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start windlass dev: %v", err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("windlass dev stdout:\n%s\nwindlass dev stderr:\n%s", d.stdout.String(), d.stderr.String())
		}
	})
	return d
}

// waitStdout polls dev's stdout until cond holds, failing the test when dev
// exits first or after within.
func (d *cliDev) waitStdout(t *testing.T, within time.Duration, what string, cond func(stdout string) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond(d.stdout.String()) {
		select {
		case <-d.done:
			if cond(d.stdout.String()) {
				return
			}
			t.Fatalf("windlass dev exited (%v) before %s", d.err, what)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("windlass dev: %s not within %s", what, within)
		}
	}
}

// interrupt sends SIGINT, as Ctrl-C does, and requires a clean exit (code 0)
// within the bound.
func (d *cliDev) interrupt(t *testing.T, within time.Duration) {
	t.Helper()
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("SIGINT to windlass dev: %v", err)
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-d.done:
	case <-timer.C:
		t.Fatalf("windlass dev did not exit within %s of SIGINT", within)
	}
	if d.err != nil {
		t.Fatalf("windlass dev after SIGINT: %v (want exit 0)", d.err)
	}
}

// cliResult is one finished windlass command.
type cliResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d after %s\n--- stdout:\n%s\n--- stderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// cliRun runs the binary with args to completion (bounded at 60 s) and
// returns its exit code and output.
func cliRun(t *testing.T, bin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("windlass %s: not done within 60 s (%v)\n%s", strings.Join(args, " "), err, r)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("windlass %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// cliHasLine reports whether some line of out starts (after indentation)
// with prefix and contains s.
func cliHasLine(out, prefix, s string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, prefix) && strings.Contains(line, s) {
			return true
		}
	}
	return false
}
