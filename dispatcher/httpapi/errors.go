package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/windlass-dev/windlass"
)

// Error codes of the API's own failures. A refused call uses the result
// codes of the protocol (windlass.Code*: invalid_arguments, unknown_tool,
// no_worker, payload_too_large, invalid_call, spec_mismatch, unavailable,
// rate_limited, overloaded); these name what only an HTTP request can get
// wrong.
const (
	// CodeUnauthorized: no API key, or not a known one.
	CodeUnauthorized windlass.ErrorCode = "unauthorized"
	// CodeInvalidRequest: a query parameter or header is wrong (an unknown
	// style, a bad reason).
	CodeInvalidRequest windlass.ErrorCode = "invalid_request"
	// CodeUnsupportedMediaType: a body that is not application/json.
	CodeUnsupportedMediaType windlass.ErrorCode = "unsupported_media_type"
	// CodeRequestTimeout: the request's body did not arrive whole within
	// [Config.BodyTimeout]; the connection is closed after the answer.
	CodeRequestTimeout windlass.ErrorCode = "request_timeout"
	// CodeUnknownCall: the fleet has no record of the call id (never
	// accepted, or past the retention window).
	CodeUnknownCall windlass.ErrorCode = "unknown_call"
	// CodeCallFinished: the call to cancel already has its result, which
	// the error body carries as "result".
	CodeCallFinished windlass.ErrorCode = "call_finished"
	// CodeTooManyStreams: the API key (or the whole process) already has
	// as many event streams open as [Config.MaxStreamsPerKey]
	// ([Config.MaxStreams]) allow; answered 429 with a Retry-After.
	CodeTooManyStreams windlass.ErrorCode = "too_many_streams"
	// CodeNotFound: no such route.
	CodeNotFound windlass.ErrorCode = "not_found"
	// CodeMethodNotAllowed: the route exists, the method does not.
	CodeMethodNotAllowed windlass.ErrorCode = "method_not_allowed"
	// CodeInternal: a bug.
	CodeInternal windlass.ErrorCode = "internal"
)

// statusOf is the one table from error codes to HTTP statuses.
var statusOf = map[windlass.ErrorCode]int{
	windlass.CodeInvalidCall:      http.StatusBadRequest,
	CodeInvalidRequest:            http.StatusBadRequest,
	CodeUnauthorized:              http.StatusUnauthorized,
	windlass.CodeUnknownTool:      http.StatusNotFound,
	CodeUnknownCall:               http.StatusNotFound,
	CodeNotFound:                  http.StatusNotFound,
	CodeMethodNotAllowed:          http.StatusMethodNotAllowed,
	CodeRequestTimeout:            http.StatusRequestTimeout,
	CodeCallFinished:              http.StatusConflict,
	windlass.CodeIDConflict:       http.StatusConflict,
	windlass.CodeSpecMismatch:     http.StatusConflict,
	CodeTooManyStreams:            http.StatusTooManyRequests,
	windlass.CodeRateLimited:      http.StatusTooManyRequests,
	windlass.CodeOverloaded:       http.StatusTooManyRequests,
	windlass.CodePayloadTooLarge:  http.StatusRequestEntityTooLarge,
	CodeUnsupportedMediaType:      http.StatusUnsupportedMediaType,
	windlass.CodeInvalidArguments: http.StatusUnprocessableEntity,
	CodeInternal:                  http.StatusInternalServerError,
	windlass.CodeNoWorker:         http.StatusServiceUnavailable,
	windlass.CodeUnavailable:      http.StatusServiceUnavailable,
}

// HTTPStatus is the HTTP status of an error response with code; a code the
// API never answers with is 500.
func HTTPStatus(code windlass.ErrorCode) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorBody is the body of every error response:
// {"error":{"code","message"}}, and for call_finished the call's result.
type ErrorBody struct {
	// Error is the code and the message.
	Error windlass.CallError `json:"error"`
	// Result is the finished call's result (call_finished only).
	Result *windlass.ToolResult `json:"result,omitempty"`
	// Tool is the tool's current definition in the request's style
	// (spec_mismatch only): show it to the model, and call again with
	// SpecHash.
	Tool map[string]any `json:"tool,omitempty"`
	// SpecHash is the tool's current spec hash (spec_mismatch only).
	SpecHash string `json:"spec_hash,omitempty"`
}

// retryAfter is the Retry-After (seconds) of the codes a client should
// simply try again: unavailable (NATS down or restarting, which takes
// seconds) and too_many_streams (a slot frees when a stream ends).
var retryAfter = map[windlass.ErrorCode]string{
	windlass.CodeUnavailable: "2",
	CodeTooManyStreams:       "1",
}

// writeError answers code's status with an error body, and a Retry-After
// for the codes that have one.
func writeError(w http.ResponseWriter, code windlass.ErrorCode, message string) {
	writeCallError(w, windlass.CallError{Code: code, Message: message})
}

// writeCallError answers ce's status with ce as the error body. Its
// Retry-After is ce's own advice (RetryAfterMS, which rate_limited and
// overloaded refusals carry, also in the body) in whole seconds, rounded
// up, at least 1; else the code's, for the codes that have one.
func writeCallError(w http.ResponseWriter, ce windlass.CallError) {
	if ce.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(ce.RetryAfter()), 10))
	} else if s, ok := retryAfter[ce.Code]; ok {
		w.Header().Set("Retry-After", s)
	}
	writeJSON(w, HTTPStatus(ce.Code), ErrorBody{Error: ce})
}

// retryAfterSeconds is d as a Retry-After: whole seconds, rounded up, at
// least 1 (0 would invite an immediate retry).
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"error":{"code":"internal","message":"encode the response"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
