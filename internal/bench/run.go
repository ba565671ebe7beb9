package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Config selects the scenarios of [Run]: every tool × payload × load.
type Config struct {
	// InFlight are the closed loops' caller counts. Default, when Rates is
	// empty too: 1, 8, 64, 512.
	InFlight []int
	// Rates are the open loops' rates, calls a second. Default none.
	Rates []float64
	// Payloads are the sizes of a call's arguments, in bytes. Default 128.
	Payloads []int
	// Tools are the bench tools to call. Default bench_noop.
	Tools []string
	// Calls is the measured calls of each path in each scenario. Zero:
	// Duration decides.
	Calls int
	// Duration bounds each path's run in each scenario when Calls is
	// zero. Default 2s.
	Duration time.Duration
	// Sleep is bench_sleep's sleep, and the raw responders' for its
	// scenarios. Default 100ms.
	Sleep time.Duration
	// Progress, when set, is called about twice a second, and once at
	// each path's end, with the state of the run.
	Progress func(Progress)
}

// Progress is the state of a running benchmark.
type Progress struct {
	Scenario      string  // its name
	Index, Of     int     // scenario Index (from 1) of Of
	Path          string  // fleet, raw_jetstream or raw_request
	Done          int64   // calls answered on this path so far
	Target        int     // calls to make, 0 when the run is timed
	Elapsed       float64 // seconds on this path
	PathsFinished int     // paths of this scenario finished
}

// Scenario is one tool, payload and load.
type Scenario struct {
	Tool    string `json:"tool"`
	Payload int    `json:"payload_bytes"`
	// Mode is "closed" (InFlight callers) or "open" (Rate calls a second).
	Mode     string  `json:"mode"`
	InFlight int     `json:"inflight,omitempty"`
	Rate     float64 `json:"rate,omitempty"`
}

// Name is a short label, e.g. "bench_noop 128B closed/64".
func (s Scenario) Name() string {
	if s.Mode == "open" {
		return fmt.Sprintf("%s %dB open/%g/s", s.Tool, s.Payload, s.Rate)
	}
	return fmt.Sprintf("%s %dB closed/%d", s.Tool, s.Payload, s.InFlight)
}

// Result is a scenario's figures on each path, and the fleet's ratios to
// each baseline from the same run.
type Result struct {
	Scenario
	Name         string `json:"name"`
	Fleet        Stats  `json:"fleet"`
	RawJetStream Stats  `json:"raw_jetstream"`
	RawRequest   Stats  `json:"raw_request"`
	// RawStored is the raw JetStream round trip storing the two messages
	// the fleet stores for a call (see [Env.RawStored]).
	RawStored Stats `json:"raw_jetstream_stored"`
	// VsJetStream, VsRequest and VsStored are the fleet's ratios to each
	// baseline.
	VsJetStream Ratios `json:"vs_raw_jetstream"`
	VsRequest   Ratios `json:"vs_raw_request"`
	VsStored    Ratios `json:"vs_raw_jetstream_stored"`
}

// Report is a whole run.
type Report struct {
	Machine   Machine   `json:"machine"`
	Started   time.Time `json:"started"`
	Scenarios []Result  `json:"scenarios"`
}

// Scenarios expands cfg into its scenarios, with defaults applied.
func (cfg Config) Scenarios() []Scenario {
	cfg = cfg.withDefaults()
	var out []Scenario
	for _, tool := range cfg.Tools {
		for _, p := range cfg.Payloads {
			for _, n := range cfg.InFlight {
				out = append(out, Scenario{Tool: tool, Payload: p, Mode: "closed", InFlight: n})
			}
			for _, r := range cfg.Rates {
				out = append(out, Scenario{Tool: tool, Payload: p, Mode: "open", Rate: r})
			}
		}
	}
	return out
}

func (cfg Config) withDefaults() Config {
	if cfg.InFlight == nil && cfg.Rates == nil {
		cfg.InFlight = []int{1, 8, 64, 512}
	}
	if len(cfg.Payloads) == 0 {
		cfg.Payloads = []int{128}
	}
	if len(cfg.Tools) == 0 {
		cfg.Tools = []string{NoopTool}
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 2 * time.Second
	}
	if cfg.Sleep <= 0 {
		cfg.Sleep = 100 * time.Millisecond
	}
	return cfg
}

// Validate names the first setting that cannot run.
func (cfg Config) Validate() error {
	for _, n := range cfg.InFlight {
		if n < 1 {
			return fmt.Errorf("bench: in flight %d: must be at least 1", n)
		}
	}
	for _, r := range cfg.Rates {
		if r <= 0 {
			return fmt.Errorf("bench: rate %g: must be above 0", r)
		}
	}
	for _, p := range cfg.Payloads {
		if p < 0 || p > 512<<10 {
			return fmt.Errorf("bench: payload %d: must be 0 to 512 KiB", p)
		}
	}
	for _, t := range cfg.Tools {
		if t != NoopTool && t != SleepTool {
			return fmt.Errorf("bench: tool %q: use %s or %s", t, NoopTool, SleepTool)
		}
	}
	if cfg.Calls < 0 {
		return fmt.Errorf("bench: calls %d: must not be negative", cfg.Calls)
	}
	return nil
}

// Run measures every scenario of cfg on e: for each, the raw JetStream
// round trip, raw request/reply, the raw round trip storing what the fleet
// stores, and the fleet, one after the other, each
// after a short warm-up.
func (e *Env) Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	rep := Report{Machine: e.Machine(ctx), Started: time.Now().UTC()}
	scenarios := cfg.Scenarios()
	for i, sc := range scenarios {
		work := time.Duration(0)
		if sc.Tool == SleepTool {
			work = cfg.Sleep
		}
		paths := []struct {
			name string
			call CallFunc
			out  *Stats
		}{
			{"raw_jetstream", e.RawJetStream(sc.Payload, work), nil},
			{"raw_request", e.RawRequest(sc.Payload, work), nil},
			{"raw_jetstream_stored", e.RawStored(sc.Payload, work), nil},
			{"fleet", e.Fleet(sc.Tool, sc.Payload, cfg.Sleep), nil},
		}
		res := Result{Scenario: sc, Name: sc.Name()}
		paths[0].out, paths[1].out, paths[2].out, paths[3].out = &res.RawJetStream, &res.RawRequest, &res.RawStored, &res.Fleet
		load := Load{InFlight: sc.InFlight, Rate: sc.Rate, Calls: cfg.Calls, Duration: cfg.Duration}
		for pi, p := range paths {
			Measure(ctx, warmUp(sc, work), p.call, nil)
			*p.out = e.measure(ctx, load, p.call, cfg.Progress, Progress{Scenario: sc.Name(), Index: i + 1, Of: len(scenarios), Path: p.name, PathsFinished: pi, Target: target(load)})
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
		}
		res.VsJetStream = ratios(res.Fleet, res.RawJetStream)
		res.VsRequest = ratios(res.Fleet, res.RawRequest)
		res.VsStored = ratios(res.Fleet, res.RawStored)
		rep.Scenarios = append(rep.Scenarios, res)
	}
	return rep, nil
}

// target is the calls a load makes, when it is not timed.
func target(l Load) int {
	if l.Calls > 0 || l.Rate == 0 {
		return l.Calls
	}
	return max(int(l.Rate*l.Duration.Seconds()), 1)
}

// warmUp is a short closed loop that opens connections, consumers and
// caches before a path is measured: two rounds at the scenario's
// concurrency, 20 to 200 calls (one round of a sleeping tool).
func warmUp(sc Scenario, work time.Duration) Load {
	n := sc.InFlight
	if sc.Mode == "open" {
		n = max(int(sc.Rate*work.Seconds()), 8)
	}
	calls := min(max(2*n, 20), 200)
	if work > 0 {
		calls = n
	}
	return Load{InFlight: n, Calls: calls}
}

// measure runs one path, reporting progress while it runs.
func (e *Env) measure(ctx context.Context, load Load, call CallFunc, report func(Progress), p Progress) Stats {
	if report == nil {
		return Measure(ctx, load, call, nil)
	}
	var done atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.Done, p.Elapsed = done.Load(), time.Since(start).Seconds()
				report(p)
			}
		}
	}()
	s := Measure(ctx, load, call, &done)
	close(stop)
	<-ticked
	p.Done, p.Elapsed, p.PathsFinished = done.Load(), time.Since(start).Seconds(), p.PathsFinished+1
	report(p)
	return s
}

// Find returns the result of the scenario named name.
func (r Report) Find(name string) (Result, bool) {
	i := slices.IndexFunc(r.Scenarios, func(x Result) bool { return x.Name == name })
	if i < 0 {
		return Result{}, false
	}
	return r.Scenarios[i], true
}
