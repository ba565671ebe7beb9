package mcpserver

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
)

// Annotations maps a spec's risk hints onto MCP tool annotations, with
// requires_approval as the authority: a gated tool (every call, or the
// calls its approval condition holds for) is advertised with readOnlyHint
// false and destructiveHint true whatever its hints say. A tool with
// neither hints nor approval has no annotations (nil).
func Annotations(s windlass.Spec) *mcp.ToolAnnotations {
	h := s.Hints
	if h.IsZero() && !s.Gated() {
		return nil
	}
	a := &mcp.ToolAnnotations{}
	if h != nil {
		if h.ReadOnly != nil {
			a.ReadOnlyHint = *h.ReadOnly
		}
		if h.Destructive != nil {
			a.DestructiveHint = new(*h.Destructive)
		}
		if h.Idempotent != nil {
			a.IdempotentHint = *h.Idempotent
		}
		if h.OpenWorld != nil {
			a.OpenWorldHint = new(*h.OpenWorld)
		}
	}
	if s.Gated() {
		a.ReadOnlyHint = false
		a.DestructiveHint = new(true)
	}
	return a
}
