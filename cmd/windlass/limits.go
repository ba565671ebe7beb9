package main

import (
	"flag"
	"fmt"

	"github.com/windlass-dev/windlass/limits"
)

// limitsFlags registers the admission limits of a dispatcher (see package
// limits): a file, and flags for its top-level entries, which override the
// file's when given. The returned func reads them after parsing; a bad
// value is an error naming the flag or the file's entry and the rule.
func limitsFlags(fs *flag.FlagSet) func() (limits.Config, error) {
	file := stringFlag(fs, "limits", "", "limits file (YAML) of rates and caps per tool and key; see README, \"Limits\"")
	none := boolFlag(fs, "no-limits", false, "no admission limits at all, and an unbounded calls stream")
	keyRate := stringFlag(fs, "key-rate", "", "each key's rate for each tool: N/s, N/m or N/h, optionally with \" burst B\" (default: none)")
	keyInFlight := intFlag(fs, "key-max-in-flight", 0, fmt.Sprintf("each key's cap of calls of a tool queued or running; -1: none (0: the file's, else %d)", limits.DefaultMaxInFlight))
	toolQueued := intFlag(fs, "tool-max-queued", 0, fmt.Sprintf("each tool's cap of calls queued or running, all keys together; -1: none (0: the file's, else %d)", limits.DefaultMaxQueued))
	streamQueued := intFlag(fs, "max-queued-calls", 0, fmt.Sprintf("bound of the calls stream, all tools; -1: none (0: the file's, else %d)", limits.DefaultMaxQueuedCalls))
	return func() (limits.Config, error) {
		if *none {
			if *file != "" {
				return limits.Config{}, fmt.Errorf("--no-limits and --limits %s: pick one", *file)
			}
			return limits.Unlimited(), nil
		}
		var c limits.Config
		if *file != "" {
			var err error
			if c, err = limits.Load(*file); err != nil {
				return limits.Config{}, fmt.Errorf("--limits: %w", err)
			}
		}
		if *keyRate != "" {
			r, err := limits.ParseRate(*keyRate)
			if err != nil {
				return limits.Config{}, fmt.Errorf("--key-rate: %w", err)
			}
			c.Default.Rate = r
		}
		for _, o := range []struct {
			flag string
			v    int
			to   *int
		}{{"key-max-in-flight", *keyInFlight, &c.Default.MaxInFlight}, {"tool-max-queued", *toolQueued, &c.MaxQueued}, {"max-queued-calls", *streamQueued, &c.MaxQueuedCalls}} {
			if o.v < limits.NoLimit {
				return limits.Config{}, fmt.Errorf("--%s %d: want a positive number of calls, or -1 for none", o.flag, o.v)
			}
			if o.v != 0 {
				*o.to = o.v
			}
		}
		return c, c.Validate()
	}
}
