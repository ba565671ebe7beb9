package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/limits"
)

// ToolStatus is one tool in [FleetStatus].
type ToolStatus struct {
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// RequiresApproval reports a gated tool.
	RequiresApproval bool `json:"requires_approval,omitempty"`
	// ApprovalCondition is the tool's approval condition, when only the
	// calls it holds for are gated (see windlass.Spec.ApprovalCondition).
	ApprovalCondition string `json:"approval_condition,omitempty"`
	// LiveWorkers are the ids of the workers holding a live lease.
	LiveWorkers []string `json:"live_workers"`
	// Queued counts calls waiting in the tool's queue for a worker (its
	// consumer's pending messages).
	Queued uint64 `json:"queued"`
	// InFlight counts calls delivered to a worker and not yet settled (the
	// consumer's ack pending): running, or about to be redelivered.
	InFlight int `json:"in_flight"`
	// Redelivered counts calls delivered more than once and not yet
	// settled: their worker was lost or stalled, or a retry is due.
	Redelivered int `json:"redelivered"`
	// Held counts gated calls the approval service holds pending a
	// decision.
	Held int `json:"held"`
	// ExecutionRate is the rate its workers start calls at, fleet-wide,
	// as advertised ("20/s"); absent when it has none.
	ExecutionRate string `json:"execution_rate,omitempty"`
	// Limits are the tool's admission limits as this dispatcher's
	// Config.Limits set them, and their use across the fleet; nil when
	// this dispatcher has no limits.
	Limits *ToolLimitsStatus `json:"limits,omitempty"`
}

// ToolLimitsStatus is a tool's admission limits and their use (see
// package limits).
type ToolLimitsStatus struct {
	// MaxQueued caps the tool's calls queued or running, all keys
	// together (-1: none).
	MaxQueued int `json:"max_queued"`
	// InFlight counts the tool's calls holding a slot, all keys.
	InFlight int `json:"in_flight"`
	// Keys are the keys with calls in flight, and the keys the limits
	// name for the tool: each one's limit and use. "default" is the limit
	// of a key not named.
	Keys map[string]KeyLimitStatus `json:"keys"`
	// Error says why the use could not be read (Redis unreachable).
	Error string `json:"error,omitempty"`
}

// KeyLimitStatus is one key's limit for a tool, and its use.
type KeyLimitStatus struct {
	// Rate is the key's rate ("10/s burst 20", or "none").
	Rate string `json:"rate"`
	// MaxInFlight caps the key's calls queued or running (-1: none).
	MaxInFlight int `json:"max_in_flight"`
	// InFlight counts the key's calls holding a slot.
	InFlight int `json:"in_flight"`
}

// FleetStatus is the fleet at a glance: every tool in the registry with
// its live workers, its queue and its held approvals.
type FleetStatus struct {
	// At is when the status was read.
	At time.Time `json:"at"`
	// Tools in the registry, by name.
	Tools []ToolStatus `json:"tools"`
	// RegistryStaleness is how long ago this dispatcher's registry view
	// last synced with Redis.
	RegistryStaleness time.Duration `json:"registry_staleness_ns"`
	// ApprovalService reports whether an approval service answered.
	ApprovalService bool `json:"approval_service"`
}

// Fleet reads the fleet's status: the registry from this dispatcher's
// view, each tool's queue from its consumer on the calls stream, and the
// held calls from the approval service (none when no approval service
// runs).
func (d *Dispatcher) Fleet(ctx context.Context) (FleetStatus, error) {
	tools, asOf := d.view.Tools()
	fs := FleetStatus{At: time.Now(), RegistryStaleness: d.view.Staleness(), Tools: make([]ToolStatus, 0, len(tools))}
	held, answered, err := d.heldByTool(ctx)
	if err != nil {
		return fs, err
	}
	fs.ApprovalService = answered
	for _, t := range tools {
		ts := ToolStatus{Tool: t.Spec.Name, RequiresApproval: t.Spec.RequiresApproval, ApprovalCondition: t.Spec.ApprovalCondition,
			LiveWorkers: t.LiveWorkers(asOf), Held: held[t.Spec.Name]}
		if !t.Rate.IsZero() {
			ts.ExecutionRate = t.Rate.String()
		}
		if ts.LiveWorkers == nil {
			ts.LiveWorkers = []string{}
		}
		c, err := d.js.Consumer(ctx, layout.CallsStream, layout.ConsumerName(t.Spec.Name))
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			// No worker ever served it: nothing queued there.
		case err != nil:
			return fs, fmt.Errorf("dispatcher: fleet: queue of %q: %w", t.Spec.Name, err)
		default:
			info := c.CachedInfo()
			ts.Queued, ts.InFlight, ts.Redelivered = info.NumPending, info.NumAckPending, info.NumRedelivered
		}
		ts.Limits = d.limitsOf(ctx, t.Spec.Name)
		fs.Tools = append(fs.Tools, ts)
	}
	return fs, nil
}

// heldByTool asks the approval service how many calls it holds pending, by
// tool; answered is false when no approval service runs.
func (d *Dispatcher) heldByTool(ctx context.Context) (held map[string]int, answered bool, err error) {
	reqCtx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	m, err := d.cfg.Conn.RequestWithContext(reqCtx, layout.ApprovalSummarySubject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("dispatcher: fleet: ask the approval service: %w", err)
	}
	var reply struct {
		Pending map[string]int `json:"pending"`
		Error   string         `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return nil, false, fmt.Errorf("dispatcher: fleet: approval service reply: %w", err)
	}
	if reply.Error != "" {
		return nil, false, fmt.Errorf("dispatcher: fleet: approval service: %s", reply.Error)
	}
	return reply.Pending, true, nil
}

// limitsOf is a tool's limits and their use; nil without limits. The use
// is read from Redis; when it cannot be, the limits are still reported,
// with the error.
func (d *Dispatcher) limitsOf(ctx context.Context, tool string) *ToolLimitsStatus {
	a := d.admission
	if a.enforcer == nil {
		return nil
	}
	st := &ToolLimitsStatus{MaxQueued: a.cfg.ToolMaxQueued(tool), Keys: map[string]KeyLimitStatus{}}
	add := func(key string, inFlight int) {
		l := a.cfg.For(tool, key)
		st.Keys[key] = KeyLimitStatus{Rate: l.Rate.String(), MaxInFlight: l.MaxInFlight, InFlight: inFlight}
	}
	add(limits.DefaultKey, 0)
	for key := range a.cfg.Keys {
		add(key, 0)
	}
	for key := range a.cfg.Tools[tool].Keys {
		add(key, 0)
	}
	use, err := a.enforcer.Use(ctx, tool)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	for key, n := range use {
		add(key, n)
		st.InFlight += n
	}
	return st
}
