package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes a report as a table for people: per scenario and path,
// calls/s and latency percentiles, and the fleet's ratios to each baseline
// ("stores": the raw round trip storing what the fleet stores).
func WriteTable(w io.Writer, r Report) error {
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), load %s; %s; nats-server %s; redis %s\n\n", m.CPUs, m.CPUModel, m.Load, m.Go, m.NATS, m.Redis)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpath\tcalls\terrors\tcalls/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\t")
	for _, res := range r.Scenarios {
		for _, row := range []struct {
			path string
			s    Stats
		}{{"raw jetstream", res.RawJetStream}, {"raw request", res.RawRequest}, {"raw js, fleet's stores", res.RawStored}, {"fleet", res.Fleet}} {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", res.Name, row.path, row.s.Calls, row.s.Errors, row.s.PerSec, row.s.P50, row.s.P90, row.s.P99, row.s.P999)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tthroughput vs js\tp50 vs js\tp99 vs js\tthroughput vs req\tp50 vs req\tp99 vs req\tthroughput vs stores\tp50 vs stores\t")
	for _, res := range r.Scenarios {
		a, b, c := res.VsJetStream, res.VsRequest, res.VsStored
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", res.Name, a.Throughput, a.P50, a.P99, b.Throughput, b.P50, b.P99, c.Throughput, c.P50)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range r.Scenarios {
		for _, s := range []Stats{res.RawJetStream, res.RawRequest, res.RawStored, res.Fleet} {
			if s.FirstError != "" {
				fmt.Fprintf(w, "\n%s: %d failed calls; first: %s\n", res.Name, s.Errors, s.FirstError)
				break
			}
		}
	}
	return nil
}
