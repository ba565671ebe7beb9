package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/limits"
)

// tellApprovalWait says on w that the gated call id waits for approval,
// and, once the approval service holds it, until when; stop ends it.
func tellApprovalWait(ctx context.Context, d *dispatcher.Dispatcher, id, tool string, w io.Writer) (stop func()) {
	fmt.Fprintf(w, "windlass: call %s to %s needs approval; waiting (approve it with: windlass approvals approve %s)\n", id, tool, id)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st, err := d.Status(ctx, id); err == nil && st.Approval != nil {
				if st.Approval.Status == "pending" {
					fmt.Fprintf(w, "windlass: call %s is waiting for approval, expires at %s\n", id, st.Approval.ExpiresAt.Local().Format(time.RFC3339))
				}
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// readArguments reads a call's JSON arguments as given on the command
// line: the text itself, @FILE for a file's (large arguments do not fit a
// command line; they travel by reference in the fleet), or - for standard
// input's.
func readArguments(arg string) (string, error) {
	var b []byte
	var err error
	switch {
	case arg == "-":
		b, err = io.ReadAll(os.Stdin)
	case strings.HasPrefix(arg, "@"):
		b, err = os.ReadFile(arg[1:])
	default:
		return arg, nil
	}
	if err != nil {
		return "", fmt.Errorf("arguments %s: %w", arg, err)
	}
	return string(b), nil
}

// retryHint is "; retry after Ns" for a refusal that says when to try
// again (rate_limited, overloaded: its retry-after in whole seconds,
// rounded up), "" otherwise.
func retryHint(ce *windlass.CallError) string {
	if ce == nil || ce.RetryAfterMS <= 0 {
		return ""
	}
	return fmt.Sprintf("; retry after %ds", max(1, (ce.RetryAfter()+time.Second-1)/time.Second))
}

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("call", "call [flags] TOOL [JSON | @FILE | -]", stderr)
	c := commonFlags(fs)
	timeout := durationFlag(fs, "timeout", 0, "call deadline (default: the tool's timeout plus a queue allowance)")
	asJSON := boolFlag(fs, "json", false, "print the whole result as JSON instead of its content")
	async := boolFlag(fs, "async", false, "submit the call and print its id without waiting; follow it with watch, status or cancel")
	// No environment fallback: one id for every call would make them all
	// the same call (WINDLASS_ID is the worker's id besides).
	callID := fs.String("id", "", "the call's id, e.g. the model's tool-call id (default: a new random id); a call id already accepted is not run again, its result is returned")
	key := stringFlag(fs, "key", limits.DefaultKey, "the caller the call is counted for by the fleet's limits: a tenant's name (1-64 printable ASCII characters, no spaces, quotes, backslashes or braces)")
	readLimits := limitsFlags(fs) // this command's dispatcher admits the call: give it the fleet's limits
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := limits.ValidateKey(*key); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--key: %w", err)}
	}
	if c.limits, err = readLimits(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("call needs TOOL and optionally a JSON object of arguments")}
	}
	name, rawArgs := pos[0], "{}"
	if len(pos) == 2 {
		if rawArgs, err = readArguments(pos[1]); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	if !json.Valid([]byte(rawArgs)) {
		return &exitError{code: 2, err: fmt.Errorf("arguments %.200q are not valid JSON", rawArgs)}
	}
	if *callID != "" {
		if err := windlass.ValidateCallID(*callID); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--id: %w", err)}
		}
	}
	sess, err := c.open("call", stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	d, err := sess.dispatcher(ctx)
	if err != nil {
		return err
	}
	defer d.Close()

	opts := []dispatcher.CallOption{dispatcher.WithKey(*key)}
	if *timeout > 0 {
		opts = append(opts, dispatcher.WithTimeout(*timeout))
	}
	if *callID != "" {
		opts = append(opts, dispatcher.WithCallID(*callID))
	}
	if *async {
		id, err := d.Submit(ctx, name, json.RawMessage(rawArgs), opts...)
		if err != nil {
			if id != "" {
				fmt.Fprintln(stdout, id) // unconfirmed: the call may be queued under this id
			}
			var ce *windlass.CallError
			errors.As(err, &ce)
			return &exitError{code: 1, err: fmt.Errorf("submit %s: %w%s", name, err, retryHint(ce))}
		}
		fmt.Fprintln(stdout, id)
		return nil
	}
	var stopTelling func()
	if t, err := d.Tool(name); err == nil && needsApproval(t.Spec(), rawArgs) {
		// A human decides first, which may take minutes: say so, with the
		// id to approve, so that the wait is not silent.
		id := *callID
		if id == "" {
			id = windlass.NewCallID()
			opts = append(opts, dispatcher.WithNewCallID(id)) // named now, to be approved; no call before it
		}
		stopTelling = tellApprovalWait(ctx, d, id, name, stderr)
	}
	r, err := d.Call(ctx, name, json.RawMessage(rawArgs), opts...)
	if stopTelling != nil {
		stopTelling()
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		_ = enc.Encode(r)
	}
	if err != nil {
		return err
	}
	if r.IsError {
		return &exitError{code: 1, err: fmt.Errorf("%s: %s%s", r.Error.Code, r.Content, retryHint(r.Error))}
	}
	if !*asJSON {
		fmt.Fprintln(stdout, r.Content)
	}
	return nil
}

// needsApproval reports whether the call will wait for a person, as the
// dispatcher decides it (a condition without an answer gates the call).
func needsApproval(spec windlass.Spec, rawArgs string) bool {
	gated, _ := spec.NeedsApproval(json.RawMessage(rawArgs))
	return gated
}
