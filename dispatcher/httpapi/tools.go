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
	tools, err := h.cfg.Dispatcher.Tools(r.Context(), style)
	list := ToolList{Style: style, Tools: tools}
	if list.Tools == nil {
		list.Tools = []map[string]any{}
	}
	if err != nil {
		perTool, ok := err.(interface{ Unwrap() []error }) // errors.Join of the tools left out
		if !ok {
			writeError(w, windlass.CodeUnavailable, err.Error())
			return
		}
		for _, e := range perTool.Unwrap() {
			list.Skipped = append(list.Skipped, e.Error())
		}
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
