package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
)

// runFleet prints the fleet at a glance (`windlass status` without an id):
// once, or every interval until ctx ends with watch.
func runFleet(ctx context.Context, d *dispatcher.Dispatcher, stdout io.Writer, asJSON, watch bool, interval time.Duration) error {
	if interval <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--interval must be positive, got %s", interval)}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		fs, err := d.Fleet(ctx)
		if err != nil {
			if ctx.Err() != nil && !first {
				return nil // interrupted while watching
			}
			return fmt.Errorf("status: %w", err)
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetEscapeHTML(false)
			if !watch {
				enc.SetIndent("", "  ")
			}
			if err := enc.Encode(fs); err != nil {
				return err
			}
		} else {
			switch {
			case watch && !first && isTerminal(stdout):
				fmt.Fprint(stdout, "\033[H\033[2J") // clear the terminal
			case watch && !first:
				fmt.Fprintln(stdout) // a pipe or a file: one table after another
			}
			printFleet(stdout, fs)
		}
		if !watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// isTerminal reports whether w is a terminal (a character device), where
// escape sequences mean something.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// printFleet writes the fleet status as a table.
func printFleet(w io.Writer, fs dispatcher.FleetStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tWORKERS\tQUEUED\tIN FLIGHT\tREDELIVERED\tHELD\tLIMITS: TOOL\tKEYS (IN FLIGHT/CAP RATE)")
	for _, t := range fs.Tools {
		held := fmt.Sprint(t.Held)
		if !t.RequiresApproval && t.ApprovalCondition == "" {
			held = "-"
		}
		toolCap, keys := limitsColumns(t.Limits)
		if t.ExecutionRate != "" {
			toolCap += " start " + t.ExecutionRate
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", t.Tool, len(t.LiveWorkers), t.Queued, t.InFlight, t.Redelivered, held, toolCap, keys)
	}
	_ = tw.Flush()
	var notes []string
	if len(fs.Tools) == 0 {
		notes = append(notes, "no tools in the registry")
	}
	if !fs.ApprovalService {
		notes = append(notes, "no approval service answered")
	}
	if fs.RegistryStaleness > 5*time.Second {
		notes = append(notes, fmt.Sprintf("registry view %s old (Redis unreachable?)", fs.RegistryStaleness.Round(time.Second)))
	}
	fmt.Fprintf(w, "at %s", fs.At.Local().Format(time.TimeOnly))
	if len(notes) > 0 {
		fmt.Fprintf(w, "; %s", strings.Join(notes, "; "))
	}
	fmt.Fprintln(w)
}

// limitsColumns are a tool's limits and their use in the status table:
// the tool's calls in flight over its cap, and each key's, with its rate.
func limitsColumns(l *dispatcher.ToolLimitsStatus) (toolCap, keys string) {
	if l == nil {
		return "-", "-"
	}
	capOf := func(n int) string {
		if n < 0 {
			return "∞"
		}
		return fmt.Sprint(n)
	}
	if l.Error != "" {
		return "? (Redis unreachable)", "?"
	}
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(l.Keys)) {
		k := l.Keys[key]
		part := fmt.Sprintf("%s %d/%s", key, k.InFlight, capOf(k.MaxInFlight))
		if k.Rate != "none" {
			part += " " + k.Rate
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("%d/%s", l.InFlight, capOf(l.MaxQueued)), strings.Join(parts, ", ")
}
