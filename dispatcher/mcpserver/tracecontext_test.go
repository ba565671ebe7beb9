package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// traceparentTransport sends the W3C traceparent it is set to with each
// request, as an instrumented MCP client in another process does.
type traceparentTransport struct {
	mu          sync.Mutex
	traceparent string
}

// set makes the next requests carry traceID and spanID; empty: no trace
// context.
func (tr *traceparentTransport) set(traceID, spanID string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.traceparent = ""
	if traceID != "" {
		tr.traceparent = "00-" + traceID + "-" + spanID + "-01"
	}
}

func (tr *traceparentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tr.mu.Lock()
	tp := tr.traceparent
	tr.mu.Unlock()
	r = r.Clone(r.Context())
	if tp != "" {
		r.Header.Set("traceparent", tp)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestToolCallJoinsTheCallersTrace: an MCP client that sends its W3C trace
// context with a tools/call sees the fleet's spans in its own trace — the
// call's producer span is a child of the span of that request, not of the
// session's first request, and of no trace when the request carries none —
// whether the MCP endpoint is mounted in the
// dispatcher's HTTP service (as windlass dispatcher and dev serve it) or
// served alone.
func TestToolCallJoinsTheCallersTrace(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker(worker.Config{}, basicTools()...)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	d := f.Dispatcher(dispatcher.Config{TracerProvider: tp})
	fleettest.WaitCatalog(t, d, "add", "weather", "fail")

	mounted, err := mcpserver.New(t.Context(), mcpserver.Config{Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mounted.Close() })
	api, err := httpapi.New(httpapi.Config{Dispatcher: d, Extra: map[string]http.Handler{"/mcp": mounted}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	endpoints := map[string]string{
		"MountedInTheHTTPService": srv.URL + "/mcp",
		"Alone":                   serve(t, mcpserver.Config{Dispatcher: d}),
	}
	for name, endpoint := range endpoints {
		t.Run(name, func(t *testing.T) {
			tr := &traceparentTransport{}
			tr.set("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331") // the session's first requests
			cs := connectTransport(t, nil, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}})
			for i, want := range []struct{ traceID, spanID string }{
				{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
				{"5cf92f3577b34da6a3ce929d0e0e4737", "11f067aa0ba902b8"},
				{"", ""}, // no trace context: a trace of its own
			} {
				tr.set(want.traceID, want.spanID)
				id := name + "-" + string(rune('a'+i))
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}, Meta: mcp.Meta{mcpserver.MetaCallID: id}})
				cancel()
				if err != nil || res.IsError {
					t.Fatalf("call %s: %+v, %v", id, res, err)
				}
				send := producerSpan(spans, id)
				if send == nil {
					t.Fatalf("no producer span for call %s", id)
				}
				if p := send.Parent(); want.traceID == "" {
					if p.IsValid() {
						t.Errorf("call %s, sent with no trace context: the producer span's parent is %s/%s; want none", id, p.TraceID(), p.SpanID())
					}
				} else if p.TraceID().String() != want.traceID || p.SpanID().String() != want.spanID || !p.IsRemote() {
					t.Errorf("call %s: the producer span's parent is %s/%s (remote %v); want the caller's %s/%s", id, p.TraceID(), p.SpanID(), p.IsRemote(), want.traceID, want.spanID)
				}
			}
		})
	}
}

// producerSpan is the ended producer span of the call with id.
func producerSpan(spans *tracetest.SpanRecorder, id string) sdktrace.ReadOnlySpan {
	for _, s := range spans.Ended() {
		if s.SpanKind().String() != "producer" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Value.AsString() == id {
				return s
			}
		}
	}
	return nil
}
