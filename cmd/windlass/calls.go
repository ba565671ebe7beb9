package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
)

// callIDArg checks that pos is exactly one call id.
func callIDArg(fs *flag.FlagSet, pos []string) (string, error) {
	if len(pos) != 1 {
		fs.Usage()
		return "", &exitError{code: 2, err: fmt.Errorf("%s needs exactly one call ID, got %d arguments", fs.Name(), len(pos))}
	}
	if err := windlass.ValidateCallID(pos[0]); err != nil {
		return "", &exitError{code: 2, err: fmt.Errorf("%s: call ID: %w", fs.Name(), err)}
	}
	return pos[0], nil
}

// openDispatcher opens a session and starts a dispatcher on it; close
// undoes both.
func (c *common) openDispatcher(ctx context.Context, name string, stderr io.Writer) (d *dispatcher.Dispatcher, closeAll func(), err error) {
	sess, err := c.open(name, stderr)
	if err != nil {
		return nil, nil, err
	}
	d, err = sess.dispatcher(ctx)
	if err != nil {
		sess.Close()
		return nil, nil, err
	}
	return d, func() { _ = d.Close(); sess.Close() }, nil
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cancel", "cancel [flags] ID", stderr)
	c := commonFlags(fs)
	reason := stringFlag(fs, "reason", "", "why; quoted in the canceled result its caller gets")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	id, err := callIDArg(fs, pos)
	if err != nil {
		return err
	}
	d, closeAll, err := c.openDispatcher(ctx, "cancel", stderr)
	if err != nil {
		return err
	}
	defer closeAll()
	err = d.Cancel(ctx, id, *reason)
	var finished *dispatcher.FinishedError
	switch {
	case errors.Is(err, dispatcher.ErrUnavailable):
		return fmt.Errorf("cancel %s: not confirmed (NATS down or restarting?): the fleet could not say whether the call exists, or did not acknowledge the cancellation it was sent (the message says which); cancel again, which is the same cancellation: %w", id, err)
	case errors.Is(err, dispatcher.ErrUnknownCall):
		return &exitError{code: 1, err: fmt.Errorf("cancel %s: the fleet has no record of this call (never accepted, or past the retention window): %w", id, err)}
	case errors.As(err, &finished):
		return &exitError{code: 1, err: fmt.Errorf("cancel %s: the call already finished with result code %s; nothing to cancel: %w",
			id, cmp.Or(string(finished.Result.Code()), "success"), err)}
	case errors.Is(err, dispatcher.ErrCanceledUnanswered):
		// Canceled: whoever holds the call answers its caller.
		fmt.Fprintf(stdout, "canceled %s (its canceled result is not stored yet; the worker or approval service holding the call stores it: %v)\n", id, err)
		return nil
	case err != nil:
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	fmt.Fprintf(stdout, "canceled %s\n", id)
	return nil
}

// watchLine is one line of `watch --json`: the event, and the result on
// the finished one.
type watchLine struct {
	windlass.Event
	Result *windlass.ToolResult `json:"result,omitempty"`
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("watch", "watch [flags] ID", stderr)
	c := commonFlags(fs)
	asJSON := boolFlag(fs, "json", false, "print one JSON object per event; the finished one carries the result")
	timeout := durationFlag(fs, "timeout", 0, "stop waiting after this long (default: 15m, the dispatcher's MaxWait)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	id, err := callIDArg(fs, pos)
	if err != nil {
		return err
	}
	d, closeAll, err := c.openDispatcher(ctx, "watch", stderr)
	if err != nil {
		return err
	}
	defer closeAll()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for e, err := range d.Watch(ctx, id) {
		if err != nil {
			return fmt.Errorf("watch %s: %w", id, err)
		}
		if *asJSON {
			if err := enc.Encode(watchLine{Event: e, Result: e.Result}); err != nil {
				return err
			}
		} else {
			fmt.Fprintln(stdout, eventLine(e))
		}
		if e.Kind == windlass.EventFinished && e.Result != nil {
			return printResult(stdout, *e.Result, *asJSON)
		}
	}
	return fmt.Errorf("watch %s: the events ended without a result", id)
}

// printResult prints a result's content (unless the JSON already carried
// it) and turns an error result into exit code 1, as `call` does.
func printResult(stdout io.Writer, r windlass.ToolResult, asJSON bool) error {
	if r.IsError {
		return &exitError{code: 1, err: fmt.Errorf("%s: %s", r.Code(), r.Content)}
	}
	if !asJSON {
		fmt.Fprintln(stdout, r.Content)
	}
	return nil
}

// eventLine renders an event as one line: time, kind, then the fields it
// has.
func eventLine(e windlass.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-9s", e.Time.Local().Format("15:04:05.000"), e.Kind)
	field := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	field("tool", e.Tool)
	if e.Attempt > 0 {
		field("attempt", fmt.Sprint(e.Attempt))
	}
	field("worker", e.Worker)
	if p := e.Progress; p != nil {
		field("progress", fmt.Sprintf("%.0f%%", 100*p.Fraction))
		if p.Message != "" {
			field("message", fmt.Sprintf("%q", p.Message))
		}
	}
	if e.Error != nil {
		field("error", fmt.Sprintf("%s: %q", e.Error.Code, e.Error.Message))
	}
	if !e.RetryAt.IsZero() {
		field("retry_at", e.RetryAt.Local().Format("15:04:05.000"))
	}
	if r := e.Result; r != nil {
		field("code", cmp.Or(string(r.Code()), "success"))
		if r.DurationMS > 0 {
			field("duration", (time.Duration(r.DurationMS) * time.Millisecond).String())
		}
	}
	return b.String()
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "status [flags] [ID]", stderr)
	c := commonFlags(fs)
	asJSON := boolFlag(fs, "json", false, "print the status as one JSON object")
	watch := boolFlag(fs, "watch", false, "without ID: refresh the fleet view every --interval until interrupted")
	interval := durationFlag(fs, "interval", 2*time.Second, "refresh period of --watch")
	readLimits := limitsFlags(fs) // the dispatchers', to show beside their use
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if c.limits, err = readLimits(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(pos) == 0 {
		// The fleet at a glance.
		d, closeAll, err := c.openDispatcher(ctx, "status", stderr)
		if err != nil {
			return err
		}
		defer closeAll()
		return runFleet(ctx, d, stdout, *asJSON, *watch, *interval)
	}
	id, err := callIDArg(fs, pos)
	if err != nil {
		return err
	}
	d, closeAll, err := c.openDispatcher(ctx, "status", stderr)
	if err != nil {
		return err
	}
	defer closeAll()
	st, err := d.Status(ctx, id)
	switch {
	case errors.Is(err, dispatcher.ErrUnavailable):
		return fmt.Errorf("status %s: the fleet cannot say where the call stands right now (NATS down or restarting?): %w", id, err)
	case err != nil:
		return fmt.Errorf("status %s: %w", id, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		printStatus(stdout, st)
	}
	if st.State == dispatcher.StateUnknown {
		return &exitError{code: 1, err: fmt.Errorf("status %s: the fleet has no record of this call (never accepted, or past the retention window)", id)}
	}
	return nil
}

func printStatus(w io.Writer, st dispatcher.CallStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339Nano)
	}
	line("id", st.ID)
	line("state", string(st.State))
	line("tool", st.Tool)
	if st.Attempt > 0 {
		line("attempt", fmt.Sprint(st.Attempt))
	}
	line("worker", st.Worker)
	if p := st.Progress; p != nil {
		line("progress", strings.TrimSpace(fmt.Sprintf("%.0f%% %s", 100*p.Fraction, p.Message)))
	}
	if e := st.LastError; e != nil {
		line("last error", fmt.Sprintf("%s: %s", e.Code, e.Message))
	}
	line("retry at", when(st.RetryAt))
	line("queued at", when(st.QueuedAt))
	line("started at", when(st.StartedAt))
	line("deadline", when(st.Deadline))
	if a := st.Approval; a != nil {
		line("approval", fmt.Sprintf("%s, %d of %d approvals, expires %s, released %v", a.Status, len(a.Approvers), a.RequiredApprovals, when(a.ExpiresAt), a.Released))
	}
	if r := st.Result; r != nil {
		line("code", cmp.Or(string(r.Code()), "success"))
		line("result", r.Content)
	}
	_ = tw.Flush()
}
