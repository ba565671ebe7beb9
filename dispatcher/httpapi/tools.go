package httpapi

import (
	"fmt"
	"net/http"

	"github.com/windlass-dev/windlass"
)

// ToolList is the body of GET /v1/tools.
type ToolList struct {
	// Style is the provider format of Tools.
	Style windlass.Style `json:"style"`
	// Tools are the fleet's live tools in that format, sorted by name:
	// the list to hand the model.
	Tools []map[string]any `json:"tools"`
	// SpecHashes are the listed tools' spec hashes by name: pass the
	// model's as spec_hash on POST /v1/calls to pin the call to the
	// schema the model saw.
	SpecHashes map[string]string `json:"spec_hashes"`
	// Skipped says why a live tool is missing from Tools (a tool the
	// gemini format cannot take).
	Skipped []string `json:"skipped,omitempty"`
}

// listTools is GET /v1/tools?style=STYLE, one of windlass.Styles (default
// windlass.DefaultStyle).
func (h *Handler) listTools(w http.ResponseWriter, r *http.Request) {
	style, err := windlass.ParseStyle(r.URL.Query().Get("style"))
	if err != nil {
		writeError(w, CodeInvalidRequest, fmt.Sprintf("style %q is not known: use %s", r.URL.Query().Get("style"), windlass.StyleChoices()))
		return
	}
	// One read of the catalog: each definition beside its own hash.
	entries, err := h.cfg.Dispatcher.Catalog(r.Context())
	if err != nil {
		writeError(w, windlass.CodeUnavailable, err.Error())
		return
	}
	list := ToolList{Style: style, Tools: make([]map[string]any, 0, len(entries)), SpecHashes: make(map[string]string, len(entries))}
	for _, e := range entries {
		def, err := e.Spec.Schema(style)
		if err != nil {
			list.Skipped = append(list.Skipped, err.Error())
			continue
		}
		list.Tools = append(list.Tools, def)
		list.SpecHashes[e.Spec.Name] = e.Hash
	}
	writeJSON(w, http.StatusOK, list)
}

// healthz is GET /healthz: 200 while the process serves.
func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz is GET /readyz: 200 while NATS is connected and the registry view
// is fresh, else 503 naming what is wrong.
func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	if nc := h.cfg.Conn; nc != nil && !nc.IsConnected() {
		http.Error(w, "nats: "+nc.Status().String(), http.StatusServiceUnavailable)
		return
	}
	if age := h.cfg.Dispatcher.Staleness(); age > h.cfg.MaxStaleness {
		http.Error(w, fmt.Sprintf("registry: the view of the registry is %s old (Redis unreachable?), over %s", age.Round(1e9), h.cfg.MaxStaleness), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}
