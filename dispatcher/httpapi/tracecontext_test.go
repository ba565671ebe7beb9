package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestIncomingTraceContextIsJoined: a backend in another language that
// sends its W3C traceparent with POST /v1/calls sees the fleet's spans in
// its own trace: the call's producer span is a child of the caller's span.
func TestIncomingTraceContextIsJoined(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	f.StartWorker(worker.Config{}, windlass.MustFunc("add", func(ctx context.Context, in addArgs) (float64, error) { return in.A + in.B, nil }))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	nc := f.Conn()
	d := f.Dispatcher(dispatcher.Config{Conn: nc, TracerProvider: tp})
	fleettest.WaitCatalog(t, d, "add")
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/calls", strings.NewReader(`{"tool":"add","arguments":{"a":1,"b":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	req.Header.Set("baggage", "tenant=acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/calls = %d", resp.StatusCode)
	}
	var send sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == "send windlass.call.add" {
			send = s
		}
	}
	if send == nil {
		t.Fatal("no producer span for the call")
	}
	if p := send.Parent(); p.TraceID().String() != traceID || p.SpanID().String() != spanID || !p.IsRemote() {
		t.Errorf("the producer span's parent is %s/%s (remote %v); want the caller's %s/%s", p.TraceID(), p.SpanID(), p.IsRemote(), traceID, spanID)
	}
}
