package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// TestCallsStreamFullIs429: with the calls stream bounded to 3 calls and
// a tool whose worker is advertised but never takes a call, the fourth
// POST /v1/calls is answered 429 overloaded with a Retry-After (the
// refusal's retry-after in seconds) and retry_after_ms in the body's
// error, as the document describes; the refused id is not known.
func TestCallsStreamFullIs429(t *testing.T) {
	t.Parallel()
	f := &fleet{Fleet: fleettest.New(t), t: t, runs: new(atomic.Int64)}
	spec := f.tools()[1].Spec() // slow
	lease, err := f.Registry().Advertise(t.Context(), registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	f.d = f.Dispatcher(dispatcher.Config{Limits: limits.Config{MaxQueuedCalls: 3}})
	if f.h, err = httpapi.New(httpapi.Config{Dispatcher: f.d, Conn: f.Conn()}); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	fleettest.WaitCatalog(t, f.d, "slow")

	for range 3 {
		if r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":1},"async":true}`); r.status != http.StatusAccepted {
			t.Fatalf("POST /v1/calls = %s; want 202", r)
		}
	}
	r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":1},"id":"late","timeout_ms":60000}`)
	var body httpapi.ErrorBody
	r.decode(t, &body)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" ||
		body.Error.Code != windlass.CodeOverloaded || body.Error.RetryAfter() != limits.SlotRetryAfter || !body.Error.Retryable {
		t.Fatalf("POST /v1/calls to a full stream = %s, Retry-After %q; want 429 overloaded, Retry-After 1, retry_after_ms 1000", r, r.header.Get("Retry-After"))
	}
	s, err := schemaCompiler(t).Compile("openapi.json#/components/schemas/ErrorBody")
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s does not match ErrorBody: %v", r, err)
	}
	if r := f.do("GET", "/v1/calls/late", ""); r.status != http.StatusNotFound {
		t.Errorf("GET /v1/calls/late = %s; want 404: nothing of a refused call is stored", r)
	}
}
