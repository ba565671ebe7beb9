package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/windlass-dev/windlass/internal/bearer"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/strictjson"
)

// Handler returns the service's HTTP API (JSON) and its reference dashboard:
//
//	GET  /v1/approvals?status=pending&tool=NAME&offset=0&limit=50  list held calls
//	GET  /v1/approvals/{id}                                        one held call
//	POST /v1/approvals/{id}/approve  {"args_hash": "...", "arguments": {...}?}
//	POST /v1/approvals/{id}/reject   {"reason": "...", "no_retry": false}
//	GET  /v1/audit?since=RFC3339&after=ID&limit=N                  the audit log, a page
//	GET  /v1/me                                                    {"name": "...", "groups": [...]}
//	GET  /v1/approvals/{id}/history                                one call's audit entries
//	GET  /v1/approvals/{id}/result                                 one call's result, once run
//	GET  /v1/tools/{name}                                          a tool's spec (description, hints)
//	GET  /                                                         the dashboard page
//
// A reviewer sees and decides only the calls of tools whose policy names
// none of the reviewer groups or one of theirs (ToolPolicy.ReviewerGroups):
// others are left out of lists and the audit log, and a request for one
// is refused 403 not_allowed.
//
// Every /v1 request needs "Authorization: Bearer <reviewer token>" (the
// scheme in any case), or, from a trusted proxy, the reviewer's name in
// Config.IdentityHeader; there is no anonymous access. Decisions must be JSON
// (the media type application/json, parameters such as charset allowed),
// which a cross-site form cannot send, and a request
// whose Origin header names another host is refused; decisions are rate
// limited per reviewer. Errors are {"error":{"code","message"}} with the
// status codes of the package's errors: 400, 401, 403, 404, 409 (with the
// first decision as "call"), 412, 415, 422, 429.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/approvals", s.authed(s.handleList))
	mux.HandleFunc("GET /v1/approvals/{id}", s.authed(s.handleGet))
	mux.HandleFunc("GET /v1/approvals/{id}/arguments", s.authed(s.handleArguments))
	mux.HandleFunc("POST /v1/approvals/{id}/approve", s.authed(s.limited(s.handleApprove)))
	mux.HandleFunc("POST /v1/approvals/{id}/reject", s.authed(s.limited(s.handleReject)))
	mux.HandleFunc("GET /v1/audit", s.authed(s.handleAudit))
	mux.HandleFunc("GET /v1/me", s.authed(s.handleMe))
	mux.HandleFunc("GET /v1/approvals/{id}/history", s.authed(s.handleHistory)) // console.go
	mux.HandleFunc("GET /v1/approvals/{id}/result", s.authed(s.handleResult))   // console.go
	mux.HandleFunc("GET /v1/tools/{name}", s.authed(s.handleTool))              // console.go
	mux.HandleFunc("GET /v1/approvals/{id}/receipt", s.authed(s.handleReceipt)) // see receipt.go
	mux.HandleFunc("GET /{$}", serveDashboard)
	return mux
}

type reviewerHandler func(w http.ResponseWriter, r *http.Request, reviewer string)

// authed authenticates the bearer token and refuses cross-origin requests.
func (s *Service) authed(h reviewerHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if o := r.Header.Get("Origin"); o != "" {
			if u, err := url.Parse(o); err != nil || u.Host != r.Host {
				writeError(w, http.StatusForbidden, "cross_origin", "requests from another origin are refused")
				return
			}
		}
		name, idErr := s.proxyReviewer(r)
		if idErr != nil {
			writeError(w, idErr.status, idErr.code, idErr.message)
			return
		}
		valid := name != ""
		if !valid {
			token, _ := bearer.FromRequest(r) // the scheme in any case (RFC 7235)
			name, valid = s.auth.reviewer(token)
		}
		if !valid {
			w.Header().Set("WWW-Authenticate", `Bearer realm="windlass-approval"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "a valid reviewer bearer token is required")
			return
		}
		h(w, r, name)
	}
}

// decisionRate is each reviewer's rate of decisions, shared by every
// replica of the service: 5 a second, bursts of 20.
var decisionRate = redis_rate.Limit{Rate: 5, Period: time.Second, Burst: 20}

// limited rate-limits a reviewer's decisions across the replicas (GCRA in
// Redis, github.com/go-redis/redis_rate). When Redis cannot be asked the
// decision goes ahead (it needs Redis itself, and fails there if Redis is
// down).
func (s *Service) limited(h reviewerHandler) reviewerHandler {
	return func(w http.ResponseWriter, r *http.Request, reviewer string) {
		res, err := s.rates.Allow(r.Context(), s.store.rateKey(reviewer), decisionRate)
		if err != nil {
			s.cfg.Logger.WarnContext(r.Context(), "approval: the decision rate limit could not be checked; not enforced", "reviewer", reviewer, "error", err)
		} else if res.Allowed == 0 {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(res.RetryAfter.Round(time.Second)/time.Second))))
			writeError(w, http.StatusTooManyRequests, "rate_limited", "too many decision attempts; slow down")
			return
		}
		h(w, r, reviewer)
	}
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, reviewer string) {
	q := r.URL.Query()
	offset, err1 := atoiDefault(q.Get("offset"), 0)
	limit, err2 := atoiDefault(q.Get("limit"), 50)
	if err := errors.Join(err1, err2); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "offset and limit must be non-negative integers")
		return
	}
	calls, next, err := s.List(r.Context(), Filter{Status: Status(q.Get("status")), Tool: q.Get("tool"), Reviewer: reviewer, Offset: offset, Limit: limit})
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if calls == nil {
		calls = []*HeldCall{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": calls, "next_offset": next})
}

func atoiDefault(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, errors.New("bad integer")
	}
	return n, nil
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request, reviewer string) {
	h, err := s.GetAs(r.Context(), r.PathValue("id"), reviewer)
	if err != nil {
		s.writeDecisionError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// handleArguments answers a held call's arguments as the caller sent
// them, whole: for arguments by reference, fetched from the fleet's object
// store and checked against their SHA-256 (the held call shows a preview).
func (s *Service) handleArguments(w http.ResponseWriter, r *http.Request, reviewer string) {
	h, err := s.GetAs(r.Context(), r.PathValue("id"), reviewer)
	if err != nil {
		s.writeDecisionError(w, err)
		return
	}
	args := h.Arguments
	if h.ArgumentsRef != nil {
		store := s.payloads.Load()
		if store == nil {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the service is starting: the payloads bucket is not open yet")
			return
		}
		args, err = store.Get(r.Context(), *h.ArgumentsRef, s.cfg.PayloadLimit)
		switch {
		case errors.Is(err, payload.ErrUnreadable):
			writeError(w, http.StatusGone, "payload_unreadable", err.Error())
			return
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(args)
}

// handleAudit answers a page of the audit log: GET /v1/audit?since=&after=&limit=
// (see AuditFilter; since is RFC 3339). next_after is the cursor of the
// next page, empty on the last. The entries of calls the reviewer may not
// see (their reviewer_groups field names none of the reviewer's groups)
// are left out, so a page may hold fewer than limit entries and still have
// a next page: follow next_after until it is empty.
func (s *Service) handleAudit(w http.ResponseWriter, r *http.Request, reviewer string) {
	q := r.URL.Query()
	n, err := atoiDefault(q.Get("limit"), defaultAuditPage)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "limit must be a non-negative integer")
		return
	}
	f := AuditFilter{After: q.Get("after"), Limit: n}
	if v := q.Get("since"); v != "" {
		if f.Since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "since must be an RFC 3339 time, such as 2026-01-02T15:04:05Z")
			return
		}
	}
	events, err := s.Audit(r.Context(), f)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	next := ""
	if len(events) > 0 && len(events) == f.limit() {
		next = events[len(events)-1].ID
	}
	visible := events[:0]
	for _, ev := range events {
		if s.auth.mayDecide(reviewer, auditGroups(ev)) {
			visible = append(visible, ev)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": visible, "next_after": next})
}

// auditGroups are the reviewer groups of the call of an audit entry
// (written with every entry of a call whose tool's policy names groups).
func auditGroups(ev AuditEvent) []string {
	if g := ev.Fields["reviewer_groups"]; g != "" {
		return strings.Split(g, ",")
	}
	return nil
}

// handleMe answers who the bearer token is: GET /v1/me, {"name": "...",
// "groups": [...]} (groups sorted, [] for none), so that a dashboard can
// say whose calls it shows.
func (s *Service) handleMe(w http.ResponseWriter, _ *http.Request, reviewer string) {
	groups := s.auth.groups[reviewer]
	if groups == nil {
		groups = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": reviewer, "groups": groups})
}

// decodeBody reads a JSON decision body of at most 1 MiB, strictly (see
// internal/strictjson): one object, exact field names, no duplicate or
// unknown ones, valid UTF-8 (the edited arguments' too).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	// The media type, in any case, with any parameters (charset=utf-8);
	// not a prefix: application/jsonx is not JSON.
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("Content-Type %q: decisions must be sent as application/json (parameters such as charset=utf-8 allowed)", ct))
		return false
	}
	// 1 MiB bounds what checking its names may take: no bound on values.
	if err := strictjson.Decode(http.MaxBytesReader(w, r.Body, 1<<20), v, 0); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body: "+err.Error())
		return false
	}
	return true
}

func (s *Service) handleApprove(w http.ResponseWriter, r *http.Request, reviewer string) {
	var body struct {
		ArgsHash  string          `json:"args_hash"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if body.ArgsHash == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "args_hash is required: the hash of the arguments you reviewed")
		return
	}
	h, err := s.Approve(r.Context(), r.PathValue("id"), reviewer, body.ArgsHash, body.Arguments)
	if err != nil && h == nil {
		s.writeDecisionError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Service) handleReject(w http.ResponseWriter, r *http.Request, reviewer string) {
	var body struct {
		Reason  string `json:"reason"`
		NoRetry bool   `json:"no_retry"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	var opts []RejectOption
	if body.NoRetry {
		opts = append(opts, NoRetry())
	}
	h, err := s.Reject(r.Context(), r.PathValue("id"), reviewer, body.Reason, opts...)
	if err != nil {
		s.writeDecisionError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Service) writeDecisionError(w http.ResponseWriter, err error) {
	var (
		decided  *DecidedError
		invalid  *InvalidArgumentsError
		tooLarge *TooLargeError
	)
	switch {
	case errors.As(err, &decided):
		writeJSON(w, http.StatusConflict, map[string]any{"error": map[string]string{"code": "already_decided", "message": err.Error()}, "call": decided.Call})
	case errors.As(err, &invalid):
		writeError(w, http.StatusUnprocessableEntity, "invalid_arguments", invalid.Err.Error())
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", err.Error())
	case errors.Is(err, ErrReasonTooLong):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, ErrArgsMismatch):
		writeError(w, http.StatusPreconditionFailed, "args_hash_mismatch", err.Error())
	case errors.Is(err, ErrNotAllowed):
		writeError(w, http.StatusForbidden, "not_allowed", err.Error())
	case errors.Is(err, ErrSelfApproval):
		writeError(w, http.StatusForbidden, "self_approval", err.Error())
	case errors.Is(err, ErrAlreadyApproved):
		writeError(w, http.StatusConflict, "already_approved", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
