package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/strictjson"
)

// MaxDurationMS is the largest timeout_ms and wait_ms a request may ask
// for: the longest time.Duration in whole milliseconds (about 292 years).
// A larger value is refused (400 invalid_call naming the field and this
// maximum) rather than overflowing into some other deadline.
const MaxDurationMS = int64(math.MaxInt64 / time.Millisecond)

// CallRequest is the body of POST /v1/calls.
type CallRequest struct {
	// Tool is the tool's name. Required.
	Tool string `json:"tool"`
	// Arguments is a JSON object matching the tool's schema; absent or
	// null is {}.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ID is the caller's own call id (a model's tool-call id): submitting
	// the same id again is the same call, run once. Default: a new id.
	ID string `json:"id,omitempty"`
	// TimeoutMS sets the call's deadline, from now, at most
	// [MaxDurationMS]. Default: the tool's timeout plus the dispatcher's
	// queue allowance.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Metadata is caller-defined (requester, session). It travels in the
	// call's message whatever the arguments' size: metadata too large for
	// one (the NATS server's max payload) is refused payload_too_large.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Async answers 202 at once, without waiting for the result.
	Async bool `json:"async,omitempty"`
	// WaitMS bounds the wait for the result (never beyond the handler's
	// MaxWait, nor the call's timeout_ms), at most [MaxDurationMS].
	// Default: MaxWait.
	WaitMS int64 `json:"wait_ms,omitempty"`
	// SpecHash pins the call to the tool's spec the model saw (from
	// GET /v1/tools, spec_hashes): a call pinned to a spec the fleet no
	// longer serves is refused 409 spec_mismatch, not queued, with the
	// tool's current definition. Default: no pin.
	SpecHash string `json:"spec_hash,omitempty"`
	// Style is the provider format the model saw the tools in, for the
	// definition a spec_mismatch answer carries. Default: windlass.DefaultStyle.
	Style windlass.Style `json:"style,omitempty"`
}

// Call is a call as the API reports it: where it stands, and its result
// once it has one (a tool's failure is a result too, is_error, not an HTTP
// error), with the call's path on the API. It is the body of POST
// /v1/calls, GET and DELETE /v1/calls/{id}.
type Call struct {
	dispatcher.CallStatus
	// URL is the call's path on the API, /v1/calls/{id}, the id
	// path-escaped.
	URL string `json:"url"`
}

// callURL is a call's path on the API. No valid id is a dot-segment ("."
// or "..", which URL parsers resolve away, escaped or not: see
// windlass.ValidateCallID).
func callURL(id string) string { return "/v1/calls/" + url.PathEscape(id) }

func callFromStatus(st dispatcher.CallStatus) Call { return Call{CallStatus: st, URL: callURL(st.ID)} }

func callFromResult(r windlass.ToolResult) Call {
	return callFromStatus(dispatcher.CallStatus{ID: r.CallID, State: dispatcher.StateFinished, Tool: r.Name, Attempt: r.Attempt, Worker: r.Worker, Result: &r})
}

// createCall is POST /v1/calls.
func (h *Handler) createCall(w http.ResponseWriter, r *http.Request) {
	req, ok := h.decodeCallRequest(w, r)
	if !ok {
		return
	}
	var opts []dispatcher.CallOption
	if key := keyName(r); key != "" {
		opts = append(opts, dispatcher.WithKey(key)) // counted against the API key's limits
	}
	if req.ID != "" {
		opts = append(opts, dispatcher.WithCallID(req.ID))
	}
	if req.TimeoutMS > 0 {
		opts = append(opts, dispatcher.WithTimeout(time.Duration(req.TimeoutMS)*time.Millisecond))
	}
	if len(req.Metadata) > 0 {
		opts = append(opts, dispatcher.WithMetadata(req.Metadata))
	}
	if req.SpecHash != "" {
		opts = append(opts, dispatcher.WithSpecHash(req.SpecHash), dispatcher.WithStyle(req.Style))
	}
	args := req.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	id, err := h.cfg.Dispatcher.Submit(r.Context(), req.Tool, args, opts...)
	if err != nil {
		if id != "" {
			// Unconfirmed: the call may be queued (the message says so).
			// Its URL answers whether it is; a retry POSTs this id.
			w.Header().Set("Location", callURL(id))
		}
		h.refused(w, r, req.Tool, err)
		return
	}
	if req.Async {
		h.answerPending(w, r, id)
		return
	}
	bound := h.cfg.MaxWait
	if req.WaitMS > 0 {
		bound = min(bound, time.Duration(req.WaitMS)*time.Millisecond)
	}
	if req.TimeoutMS > 0 {
		bound = min(bound, time.Duration(req.TimeoutMS)*time.Millisecond)
	}
	waitCtx, cancel := context.WithTimeout(r.Context(), bound)
	defer cancel()
	defer context.AfterFunc(h.draining, cancel)()
	res, err := h.cfg.Dispatcher.Wait(waitCtx, id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, callFromResult(res))
	case r.Context().Err() != nil:
		// The client went away; the call goes on, and its result is kept.
	default:
		h.answerPending(w, r, id)
	}
}

// answerPending answers 202 with the call's URL and status, or 200 when
// it turns out to be finished already. The state is the one read: a
// status that could not be read, or that found no record yet, is
// "unknown" (never an assumed "queued": the call may be running, or
// finished, by then), and the URL is the way to ask again.
func (h *Handler) answerPending(w http.ResponseWriter, r *http.Request, id string) {
	st, err := h.cfg.Dispatcher.Status(r.Context(), id)
	if err != nil {
		h.cfg.Logger.WarnContext(r.Context(), "httpapi: status of a submitted call", "call_id", id, "error", err)
		st = dispatcher.CallStatus{ID: id, State: dispatcher.StateUnknown}
	}
	c := callFromStatus(st)
	if c.State == dispatcher.StateFinished {
		writeJSON(w, http.StatusOK, c)
		return
	}
	w.Header().Set("Location", c.URL)
	writeJSON(w, http.StatusAccepted, c)
}

// refused answers a call the dispatcher did not accept, with the code of
// the result the call would have had.
func (h *Handler) refused(w http.ResponseWriter, r *http.Request, tool string, err error) {
	var ce *windlass.CallError
	var sme *dispatcher.SpecMismatchError
	if errors.As(err, &sme) && errors.As(err, &ce) {
		// The tool as it is now, to show the model before it calls again.
		body := ErrorBody{Error: *ce, SpecHash: sme.CurrentHash}
		body.Tool, _ = sme.Definition() // none for a tool the style cannot take; the message says so
		writeJSON(w, HTTPStatus(ce.Code), body)
		return
	}
	if errors.As(err, &ce) {
		writeCallError(w, *ce) // with its retry-after (rate_limited, overloaded)
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	h.cfg.Logger.WarnContext(r.Context(), "httpapi: submit failed", "tool", tool, "error", err)
	writeError(w, windlass.CodeUnavailable, fmt.Sprintf("The fleet could not accept the call: %v", err))
}

// envelopeValues is the room a POST /v1/calls body has for JSON values
// beyond its arguments' (its own fields, a call's metadata).
const envelopeValues = 10_000

// englishPrinter writes numbers with thousands separators.
var englishPrinter = message.NewPrinter(language.English)

// decodeCallRequest reads a POST /v1/calls body strictly (see
// internal/strictjson): JSON only, one object, exact field names, no
// duplicate or unknown ones, valid UTF-8, within the size and time limits.
func (h *Handler) decodeCallRequest(w http.ResponseWriter, r *http.Request) (CallRequest, bool) {
	var req CallRequest
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, CodeUnsupportedMediaType, "the body must be JSON, sent with Content-Type: application/json")
		return req, false
	}
	// The body's values are bounded by the most any tool's arguments may
	// hold, and the envelope's, before the body is decoded.
	maxValues := h.cfg.Dispatcher.MaxArgumentValues() + envelopeValues
	if err := strictjson.Decode(r.Body, &req, maxValues); err != nil {
		var tooLarge *http.MaxBytesError
		var tooMany *strictjson.TooManyValuesError
		switch {
		case errors.As(err, &tooMany):
			writeError(w, windlass.CodeInvalidArguments, englishPrinter.Sprintf(
				"the request body holds more than %d JSON values: more than the arguments of any tool of the fleet may hold (the most max_argument_values of its tools) with 10,000 for the rest of the request (its metadata's values among them); it was not read", tooMany.Limit))
		case errors.As(err, &tooLarge):
			writeError(w, windlass.CodePayloadTooLarge, fmt.Sprintf("the request body is over the limit of %d bytes; send large inputs by reference", tooLarge.Limit))
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close") // the rest of the body may still come
			writeError(w, CodeRequestTimeout, fmt.Sprintf("the request body did not arrive whole within %s of its headers", h.cfg.BodyTimeout))
		default:
			writeError(w, windlass.CodeInvalidCall, "request body: "+err.Error())
		}
		return req, false
	}
	var problem string
	switch {
	case req.Tool == "":
		problem = `"tool" is required: the name of the tool to call`
	case req.TimeoutMS < 0:
		problem = `"timeout_ms" must not be negative`
	case req.TimeoutMS > MaxDurationMS:
		problem = fmt.Sprintf(`"timeout_ms" must be at most %d (about 292 years, the longest duration the fleet can represent)`, MaxDurationMS)
	case req.WaitMS < 0:
		problem = `"wait_ms" must not be negative`
	case req.WaitMS > MaxDurationMS:
		problem = fmt.Sprintf(`"wait_ms" must be at most %d (about 292 years, the longest duration the fleet can represent)`, MaxDurationMS)
	case req.Async && req.WaitMS > 0:
		problem = `"wait_ms" makes no sense with "async": true`
	case req.ID != "" && windlass.ValidateCallID(req.ID) != nil:
		problem = `"id": ` + windlass.ValidateCallID(req.ID).Error()
	case req.Style != "" && !slices.Contains(windlass.Styles, req.Style):
		problem = fmt.Sprintf(`"style" %q is not known: use %s`, req.Style, windlass.StyleChoices())
	}
	if problem != "" {
		writeError(w, windlass.CodeInvalidCall, problem)
		return req, false
	}
	return req, true
}

// pathID reads and checks the {id} of a call's path.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := windlass.ValidateCallID(id); err != nil {
		writeError(w, windlass.CodeInvalidCall, "call id: "+err.Error())
		return "", false
	}
	return id, true
}

// getCall is GET /v1/calls/{id}.
func (h *Handler) getCall(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	st, err := h.cfg.Dispatcher.Status(r.Context(), id)
	switch {
	case err != nil:
		h.unavailable(w, r, id, err)
	case st.State == dispatcher.StateUnknown:
		writeError(w, CodeUnknownCall, fmt.Sprintf("the fleet has no record of call %q (never accepted, or past the retention window)", id))
	default:
		writeJSON(w, http.StatusOK, callFromStatus(st))
	}
}

// cancelCall is DELETE /v1/calls/{id}?reason=TEXT.
func (h *Handler) cancelCall(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	reason := r.URL.Query().Get("reason")
	if len(reason) > 1024 {
		writeError(w, CodeInvalidRequest, "reason: at most 1024 bytes")
		return
	}
	err := h.cfg.Dispatcher.Cancel(r.Context(), id, reason)
	var finished *dispatcher.FinishedError
	switch {
	case errors.As(err, &finished):
		writeJSON(w, HTTPStatus(CodeCallFinished), ErrorBody{
			Error:  windlass.CallError{Code: CodeCallFinished, Message: fmt.Sprintf("call %q already finished; nothing to cancel", id)},
			Result: &finished.Result,
		})
		return
	case errors.Is(err, dispatcher.ErrUnknownCall):
		writeError(w, CodeUnknownCall, fmt.Sprintf("the fleet has no record of call %q (never accepted, or past the retention window)", id))
		return
	case errors.Is(err, dispatcher.ErrCanceledUnanswered):
		// Canceled: whoever holds the call answers it canceled, which
		// its URL shows once stored. Not "unavailable", which would say
		// nothing was canceled.
		h.cfg.Logger.WarnContext(r.Context(), "httpapi: call canceled; its canceled result is not stored yet", "call_id", id, "reason", reason, "error", err)
		h.answerPending(w, r, id)
		return
	case err != nil:
		h.unavailable(w, r, id, err)
		return
	}
	h.cfg.Logger.InfoContext(r.Context(), "httpapi: call canceled", "call_id", id, "reason", reason)
	st, err := h.cfg.Dispatcher.Status(r.Context(), id)
	if err != nil || st.State == dispatcher.StateUnknown {
		st = dispatcher.CallStatus{ID: id, State: dispatcher.StateFinished}
	}
	writeJSON(w, http.StatusOK, callFromStatus(st))
}

// unavailable answers a failure to reach the fleet.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, id string, err error) {
	if r.Context().Err() != nil {
		return
	}
	h.cfg.Logger.WarnContext(r.Context(), "httpapi: fleet request failed", "call_id", id, "error", err)
	writeError(w, windlass.CodeUnavailable, fmt.Sprintf("the fleet could not be asked about call %q: %v", id, err))
}
