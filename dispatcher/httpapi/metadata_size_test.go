package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestMetadataTooLargeIsNotUnavailable: metadata has no bound but the
// body's (the dispatcher's payload limit plus 1 MiB), and it travels in
// the call's message whatever the size of the arguments. Metadata over
// the NATS server's max payload (1 MiB) can never be published: it must
// be refused for what it is, 413 payload_too_large naming the size
// problem (the metadata), without Retry-After — not 503 unavailable with Retry-After,
// which tells the client to send again a request that can never succeed.
func TestMetadataTooLargeIsNotUnavailable(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	body := `{"tool":"add","arguments":{"a":1,"b":2},"metadata":{"session":"` + strings.Repeat("s", 2<<20) + `"}}`
	r := f.do("POST", "/v1/calls", body)
	if r.status != http.StatusRequestEntityTooLarge || r.errorCode() != windlass.CodePayloadTooLarge || r.header.Get("Retry-After") != "" {
		t.Errorf("2 MiB of metadata = %d %.300s, Retry-After %q; want 413 payload_too_large naming the size, no Retry-After",
			r.status, r.body, r.header.Get("Retry-After"))
	}
	if !strings.Contains(string(r.body), "metadata") {
		t.Errorf("the refusal %.300s does not name what is too large, the metadata", r.body)
	}
	matchesSchema(t, r, "ErrorBody")

	// The dispatcher's own Call refuses it the same way (a refusal is its
	// result).
	res, err := f.d.Call(t.Context(), "add", map[string]float64{"a": 1, "b": 2}, dispatcher.WithMetadata(map[string]string{"session": strings.Repeat("s", 2<<20)}))
	if err != nil || res.Code() != windlass.CodePayloadTooLarge {
		t.Errorf("Call with 2 MiB of metadata = %+v, %v; want a payload_too_large result", res.Error, err)
	}
}
