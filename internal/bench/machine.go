package bench

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strings"
)

// Machine describes where a run was measured.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	Load     string `json:"load_avg,omitempty"` // /proc/loadavg at the start
	OS       string `json:"os"`
	Go       string `json:"go"`
	NATS     string `json:"nats_server"`
	Redis    string `json:"redis"`
	NATSURL  string `json:"nats_url"`
}

// Machine describes this machine and e's servers.
func (e *Env) Machine(ctx context.Context) Machine {
	m := Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), NATSURL: e.natsURL}
	m.NATS, m.Redis = e.Versions(ctx)
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load = strings.TrimSpace(string(b))
	}
	return m
}
