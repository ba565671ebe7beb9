package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
)

// deadJSON is one dead call in `dead list --json`: the record with its
// sequence, the handle `dead replay` takes.
type deadJSON struct {
	Seq uint64 `json:"seq"`
	windlass.DeadCall
}

func runDead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dead", "dead list [--tool NAME] [--limit N] [--json] | dead replay SEQ [--timeout D] [--wait] | dead refusals [--tool NAME] [--limit N] [--json]", stderr)
	c := commonFlags(fs)
	tool := stringFlag(fs, "tool", "", "list, refusals: only this tool's records")
	limit := intFlag(fs, "limit", 100, "list, refusals: at most this many, oldest first")
	asJSON := boolFlag(fs, "json", false, "list, refusals: print a JSON array; replay --wait: print the whole result as JSON")
	timeout := durationFlag(fs, "timeout", 0, "replay: the new call's deadline (default: the tool's timeout plus a queue allowance)")
	wait := boolFlag(fs, "wait", false, "replay: wait for the new call's result and print it")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("dead needs list or replay SEQ")}
	}
	switch pos[0] {
	case "refusals":
		return listRefusals(ctx, c, pos, *tool, *limit, *asJSON, stdout, stderr)
	case "list":
		if len(pos) != 1 {
			return &exitError{code: 2, err: fmt.Errorf("dead list takes no arguments, got %q", pos[1:])}
		}
		if *tool != "" {
			if err := windlass.ValidateName(*tool); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--tool: %w", err)}
			}
		}
		if *limit < 1 {
			return &exitError{code: 2, err: fmt.Errorf("--limit must be at least 1, got %d", *limit)}
		}
		d, closeAll, err := c.openDispatcher(ctx, "dead", stderr)
		if err != nil {
			return err
		}
		defer closeAll()
		calls, err := d.DeadCalls(ctx, *tool, *limit)
		if err != nil {
			return fmt.Errorf("dead list: %w", err)
		}
		if *asJSON {
			out := make([]deadJSON, 0, len(calls))
			for _, dc := range calls {
				out = append(out, deadJSON{Seq: dc.Seq, DeadCall: dc})
			}
			return printJSON(stdout, out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tCALL ID\tTOOL\tDELIVERIES\tERROR\tDIED AT")
		for _, dc := range calls {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", dc.Seq, dc.Call.ID, dc.Call.Name, dc.Deliveries,
				shorten(string(dc.Error.Code)+": "+dc.Error.Message, 100), dc.DiedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	case "replay":
		if len(pos) != 2 {
			return &exitError{code: 2, err: fmt.Errorf("dead replay needs exactly one SEQ (the seq column of dead list), got %d arguments", len(pos)-1)}
		}
		seq, err := strconv.ParseUint(pos[1], 10, 64)
		if err != nil || seq == 0 {
			return &exitError{code: 2, err: fmt.Errorf("dead replay: SEQ %q must be a positive integer (the seq column of dead list)", pos[1])}
		}
		d, closeAll, err := c.openDispatcher(ctx, "dead", stderr)
		if err != nil {
			return err
		}
		defer closeAll()
		var opts []dispatcher.CallOption
		if *timeout > 0 {
			opts = append(opts, dispatcher.WithTimeout(*timeout))
		}
		id, err := d.Replay(ctx, seq, opts...)
		switch {
		case errors.Is(err, dispatcher.ErrNoDeadCall):
			return &exitError{code: 1, err: fmt.Errorf("dead replay %d: no dead call has this sequence (replayed already, or past its retention): %w", seq, err)}
		case err != nil && id == "":
			return fmt.Errorf("dead replay %d: %w", seq, err)
		case err != nil:
			// Replayed, but its dead record stays: say so, and go on.
			fmt.Fprintf(stderr, "windlass: dead replay %d: %v\n", seq, err)
		}
		fmt.Fprintln(stdout, id)
		if !*wait {
			return nil
		}
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout+5*time.Second) // the result of a timeout arrives just after it
			defer cancel()
		}
		r, err := d.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("dead replay %d: waiting for %s: %w", seq, id, err)
		}
		if *asJSON {
			_ = printJSON(stdout, r)
		}
		return printResult(stdout, r, *asJSON)
	}
	return &exitError{code: 2, err: fmt.Errorf("dead: unknown action %q (list, replay, refusals)", pos[0])}
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// listRefusals is `dead refusals`: the messages workers dropped unanswered
// (gated calls without a valid release), for an operator.
func listRefusals(ctx context.Context, c *common, pos []string, tool string, limit int, asJSON bool, stdout, stderr io.Writer) error {
	if len(pos) != 1 {
		return &exitError{code: 2, err: fmt.Errorf("dead refusals takes no arguments, got %q", pos[1:])}
	}
	if tool != "" {
		if err := windlass.ValidateName(tool); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--tool: %w", err)}
		}
	}
	if limit < 1 {
		return &exitError{code: 2, err: fmt.Errorf("--limit must be at least 1, got %d", limit)}
	}
	d, closeAll, err := c.openDispatcher(ctx, "dead", stderr)
	if err != nil {
		return err
	}
	defer closeAll()
	recs, err := d.Refusals(ctx, tool, limit)
	if err != nil {
		return fmt.Errorf("dead refusals: %w", err)
	}
	if asJSON {
		if recs == nil {
			recs = []windlass.Refusal{}
		}
		return printJSON(stdout, recs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM SEQ\tCALL ID\tTOOL\tREASON\tDETAIL\tPUBLISHED AT\tCLAIMED ORIGIN")
	for _, r := range recs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.CallID, r.Tool, r.Reason, shorten(r.Detail, 80),
			r.PublishedAt.Local().Format(time.DateTime), r.Origin)
	}
	return tw.Flush()
}

// printJSON writes v as indented JSON, without HTML escaping.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
