package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/windlass-dev/windlass"
)

// ToolEntry is one live tool of the fleet as the dispatcher sees it.
type ToolEntry struct {
	// Spec is the tool's current spec.
	Spec windlass.Spec
	// Hash is the spec's version; pass it with [WithSpecHash] to pin the
	// version a model saw.
	Hash string
	// Workers are the ids of the tool's live workers.
	Workers []string
}

// Catalog returns the tools with at least one live worker, sorted by name,
// from the dispatcher's in-memory view.
func (d *Dispatcher) Catalog(ctx context.Context) ([]ToolEntry, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	tools, asOf := d.view.Tools()
	out := make([]ToolEntry, 0, len(tools))
	for _, t := range tools {
		if live := t.LiveWorkers(asOf); len(live) > 0 {
			out = append(out, ToolEntry{Spec: t.Spec, Hash: t.Hash, Workers: live})
		}
	}
	return out, ctx.Err()
}

// Tools returns the live tools in a provider's format: the list an agent
// hands its model. An unknown style, or a tool Gemini cannot take for the
// gemini style, is an error naming it.
func (d *Dispatcher) Tools(ctx context.Context, style windlass.Style) ([]map[string]any, error) {
	entries, err := d.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, 0, len(entries))
	var errs []error
	for _, e := range entries {
		s, err := e.Spec.Schema(style)
		if errors.Is(err, windlass.ErrUnknownStyle) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// Tool returns a fleet tool as a [windlass.Tool], so an agent uses a remote
// tool exactly as a local one: its spec is the fleet's, and its Call goes
// through the dispatcher. The spec is the one in the view now; call Tool
// again after the tool changes.
func (d *Dispatcher) Tool(name string) (*FleetTool, error) {
	info, _, ok := d.view.Tool(name)
	if !ok {
		return nil, &windlass.CallError{Code: windlass.CodeUnknownTool, Message: fmt.Sprintf("Unknown tool %q: no worker has ever advertised it.", name)}
	}
	return &FleetTool{d: d, spec: info.Spec, hash: info.Hash}, nil
}

// FleetTool is a tool that runs in the fleet. It implements [windlass.Tool].
type FleetTool struct {
	d    *Dispatcher
	spec windlass.Spec
	hash string
}

// Spec implements [windlass.Tool].
func (t *FleetTool) Spec() windlass.Spec { return t.spec }

// Call implements [windlass.Tool]: the call runs in the fleet, bounded by
// ctx. A failed result is returned as its *windlass.CallError, so
// [windlass.Invoke] gives the model the same code and text; a success
// returns the value so that Render reproduces the remote content.
func (t *FleetTool) Call(ctx context.Context, args json.RawMessage) (any, error) {
	opts := []CallOption{WithSpecHash(t.hash)}
	if info, ok := windlass.CallInfoFromContext(ctx); ok && info.ID != "" {
		opts = append(opts, WithCallID(info.ID))
	}
	r, _ := t.d.Call(ctx, t.spec.Name, args, opts...)
	if r.IsError {
		if r.Error == nil { // a foreign worker may leave the error object out
			return nil, &windlass.CallError{Code: windlass.CodeToolError, Message: r.Content}
		}
		return nil, r.Error
	}
	// A string value renders as itself: return it as a string, not as its
	// JSON, so the local content equals the remote one.
	var s string
	if len(r.Data) > 0 && r.Data[0] == '"' && json.Unmarshal(r.Data, &s) == nil {
		return s, nil
	}
	if len(r.Data) == 0 {
		return r.Content, nil
	}
	return r.Data, nil
}
