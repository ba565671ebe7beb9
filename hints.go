package windlass

// ToolHints are a tool's risk hints: what its author says about its effects,
// for clients that show or auto-approve tools (MCP tool annotations). They
// are advice, never enforcement: [Spec.RequiresApproval] is the authority,
// and a gated tool is never presented as read-only or harmless whatever its
// hints say (see the dispatcher/mcpserver package).
//
// Each hint is a pointer: nil means "not stated", so a client applies its
// own default (in MCP: not read-only, destructive, not idempotent, open
// world). Set one with new(true) or new(false).
type ToolHints struct {
	// ReadOnly: the tool does not change its environment.
	ReadOnly *bool `json:"read_only,omitempty"`
	// Destructive: the tool may delete or overwrite; false means its
	// changes are only additive. Meaningful only when not read-only.
	Destructive *bool `json:"destructive,omitempty"`
	// Idempotent: calling it again with the same arguments has no further
	// effect. Meaningful only when not read-only.
	Idempotent *bool `json:"idempotent,omitempty"`
	// OpenWorld: the tool reaches an open world of external entities (the
	// web, a third-party API); false means a closed domain (a local store).
	OpenWorld *bool `json:"open_world,omitempty"`
}

// IsZero reports whether no hint is stated. A spec whose hints are zero
// encodes, and hashes, exactly like one without hints.
func (h *ToolHints) IsZero() bool {
	return h == nil || h.ReadOnly == nil && h.Destructive == nil && h.Idempotent == nil && h.OpenWorld == nil
}

// WithHints sets the tool's risk hints (see [ToolHints]); they become, for
// instance, the tool's MCP annotations.
func WithHints(h ToolHints) FuncOption {
	return func(s *Spec) {
		if h.IsZero() {
			s.Hints = nil
			return
		}
		s.Hints = &h
	}
}
