package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass/dispatcher"
)

// follow mirrors the dispatcher's catalog into the MCP server at every
// change of the fleet's tools, until Close; changed is the dispatcher's
// Changed channel taken before the catalog was last read.
func (h *Handler) follow(changed <-chan struct{}) {
	defer close(h.followDone)
	for {
		select {
		case <-changed:
		case <-h.base.Done():
			return
		}
		changed = h.d.Changed() // before reading, so no change is missed
		if err := h.sync(context.Background()); err != nil {
			if errors.Is(err, dispatcher.ErrClosed) {
				<-h.base.Done()
				return
			}
			h.cfg.Logger.Warn("mcpserver: reading the catalog failed", "error", err)
		}
	}
}

// sync makes the server's tools those of the catalog: new and changed
// tools are added (replacing), tools without a live worker removed. The
// SDK notifies connected sessions (tools/list_changed) of a change; an
// unchanged catalog changes nothing, so a worker joining a tool others
// already serve sends no notification.
func (h *Handler) sync(ctx context.Context) error {
	entries, err := h.d.Catalog(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	gone := maps.Clone(h.advertised)
	for _, e := range entries {
		delete(gone, e.Spec.Name)
		if h.advertised[e.Spec.Name] == e.Hash {
			continue
		}
		if err := h.addTool(e); err != nil {
			h.cfg.Logger.WarnContext(ctx, "mcpserver: tool not offered", "tool", e.Spec.Name, "error", err)
			continue
		}
		h.advertised[e.Spec.Name] = e.Hash
		h.cfg.Logger.DebugContext(ctx, "mcpserver: tool offered", "tool", e.Spec.Name, "spec_hash", e.Hash)
	}
	if len(gone) > 0 {
		names := slices.Sorted(maps.Keys(gone))
		for _, n := range names {
			delete(h.advertised, n)
		}
		h.server.RemoveTools(names...)
		h.cfg.Logger.DebugContext(ctx, "mcpserver: tools withdrawn", "tools", names)
	}
	return nil
}

// addTool adds (or replaces) one fleet tool in the server. The SDK panics
// on a schema it cannot take; the fleet's specs are checked already, but a
// foreign worker's might not be.
func (h *Handler) addTool(e dispatcher.ToolEntry) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the MCP SDK refused it: %v", p)
		}
	}()
	spec := e.Spec.WithDefaults()
	tool := &mcp.Tool{
		Name:        spec.Name,
		Description: spec.Description,
		InputSchema: spec.Parameters,
		Annotations: Annotations(spec),
		Meta:        mcp.Meta{MetaSpecHash: e.Hash},
	}
	hash, timeout := e.Hash, spec.Timeout
	h.server.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return h.call(ctx, req, callTarget{name: spec.Name, hash: hash, spec: spec, timeout: timeout})
	})
	return nil
}
