package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/streamread"
	"github.com/windlass-dev/windlass/registry"
)

// The reviewer's console: what the dashboard shows about one held call
// besides the call itself. Each endpoint needs a reviewer token, like the
// rest of the API (see Handler):
//
//	GET /v1/tools/{name}               the tool's current spec (description, hints, schema)
//	GET /v1/approvals/{id}/history     the call's audit entries, oldest first
//	GET /v1/approvals/{id}/result      the call's result, once it has one

// handleTool answers a tool's current spec from the registry, as the
// fleet's workers advertise it: {"name", "spec", "spec_hash",
// "updated_at"}. A held call's spec_hash that differs from spec_hash means
// the tool changed since the call was made.
func (s *Service) handleTool(w http.ResponseWriter, r *http.Request, _ string) {
	name := r.PathValue("name")
	if err := windlass.ValidateName(name); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "tool name: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), retry.ReadTimeout)
	defer cancel()
	info, err := s.cfg.Registry.Lookup(ctx, name)
	switch {
	case errors.Is(err, registry.ErrToolNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no tool %q was ever advertised in the registry", name))
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	// The spec's own wire form (spec.go), so that a field added to it
	// reaches the page without a change here.
	spec, err := json.Marshal(info.Spec)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "spec": json.RawMessage(spec), "spec_hash": info.Hash, "updated_at": info.UpdatedAt})
}

// handleHistory answers a held call's audit entries, oldest first:
// {"call_id", "items": [AuditEvent...], "truncated"} (see Service.History).
func (s *Service) handleHistory(w http.ResponseWriter, r *http.Request, reviewer string) {
	id := r.PathValue("id")
	if _, err := s.GetAs(r.Context(), id, reviewer); err != nil { // a reviewer outside its groups: 403
		s.writeDecisionError(w, err)
		return
	}
	events, truncated, err := s.History(r.Context(), id)
	if err != nil {
		s.writeDecisionError(w, err)
		return
	}
	if events == nil {
		events = []AuditEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"call_id": id, "items": events, "truncated": truncated})
}

// callResult is the answer of GET /v1/approvals/{id}/result.
type callResult struct {
	CallID   string               `json:"call_id"`
	Status   Status               `json:"status"`
	Released bool                 `json:"released"`
	Result   *windlass.ToolResult `json:"result"`             // null: none yet
	StoredAt time.Time            `json:"stored_at,omitzero"` // when the results stream stored it
}

// handleResult answers a held call's result, read from the fleet's results
// stream the way the dispatcher reads it (streamread: a replica's "none"
// confirmed by the stream's leader), with its content fetched when it
// travels by reference. "result" is null while there is none: a pending
// call, a release whose run has not finished, or a result past the
// stream's age. Only calls held by the service can be asked for.
func (s *Service) handleResult(w http.ResponseWriter, r *http.Request, reviewer string) {
	h, err := s.GetAs(r.Context(), r.PathValue("id"), reviewer)
	if err != nil {
		s.writeDecisionError(w, err)
		return
	}
	out := callResult{CallID: h.ID, Status: h.Status, Released: h.Released}
	if h.Status == StatusPending { // nothing answered it yet
		writeJSON(w, http.StatusOK, out)
		return
	}
	res, stored, err := s.storedResult(r.Context(), h.ID)
	var unavailable *resultUnavailableError
	switch {
	case errors.As(err, &unavailable):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	case err != nil:
		writeError(w, http.StatusBadGateway, "bad_result", err.Error())
		return
	}
	out.Result, out.StoredAt = res, stored
	writeJSON(w, http.StatusOK, out)
}

// resultUnavailableError is a result that could not be read now (the
// stream or the payloads bucket unreachable): asking again may succeed.
type resultUnavailableError struct{ err error }

func (e *resultUnavailableError) Error() string { return "approval: result: " + e.err.Error() }
func (e *resultUnavailableError) Unwrap() error { return e.err }

// storedResult reads call id's first result from the results stream: nil
// when there is none.
func (s *Service) storedResult(ctx context.Context, id string) (*windlass.ToolResult, time.Time, error) {
	sctx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	stream, err := s.js.Stream(sctx, layout.ResultsStream)
	cancel()
	if err != nil {
		return nil, time.Time{}, &resultUnavailableError{fmt.Errorf("the results stream: %w", err)}
	}
	m, err := streamread.FirstMsg(ctx, s.cfg.Conn, stream, layout.ResultByCall(id))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, time.Time{}, nil
	case err != nil:
		return nil, time.Time{}, &resultUnavailableError{fmt.Errorf("read the result of %q: %w", id, err)}
	}
	var res windlass.ToolResult
	if err := json.Unmarshal(m.Data, &res); err != nil {
		return nil, time.Time{}, fmt.Errorf("approval: result of %q: decode: %w", id, err)
	}
	if res.CallID != id {
		return nil, time.Time{}, fmt.Errorf("approval: result of %q: the stored result names call %q", id, res.CallID)
	}
	if res.IsError && res.Error == nil { // a foreign worker may leave the error object out
		res.Error = &windlass.CallError{Code: windlass.CodeToolError, Message: res.Content}
	}
	if res.ContentRef != nil || res.DataRef != nil {
		store := s.payloads.Load()
		if store == nil {
			return nil, time.Time{}, &resultUnavailableError{errors.New("the service is starting: the payloads bucket is not open yet")}
		}
		if res, err = store.Resolve(ctx, res, s.cfg.PayloadLimit); err != nil {
			return nil, time.Time{}, &resultUnavailableError{fmt.Errorf("the result of %q is stored by reference and could not be fetched: %w", id, err)}
		}
	}
	return &res, m.Time, nil
}
