package approval_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/telemetry"
)

// TestHoldIsASpanLinkedToTheCall holds a traced call, approves it, and
// finds the hold as a span of its own (from arrival to decision) linked to
// the caller's producer span, the call's trace context on its release, and
// the held gauge and decision latency in the metrics.
func TestHoldIsASpanLinkedToTheCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	f.stopSvc()
	f.cfg.TracerProvider, f.cfg.MeterProvider = tp, mp
	f.startService()
	d := f.Dispatcher(dispatcher.Config{TracerProvider: tp})
	releases, err := f.Conn().SubscribeSync(layout.CallsOfTool("pay"))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := d.Submit(t.Context(), "pay", payArgs{To: "bob", Amount: 5}, dispatcher.WithCallID("traced-1")); err != nil {
		t.Fatal(err)
	}
	h := f.held("traced-1")
	var send sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "send windlass.approval.pay" {
			send = s
		}
	}
	if send == nil {
		t.Fatal("no producer span of the gated call")
	}
	held := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == telemetry.MetricApprovalsHeld && len(g.DataPoints) == 1 {
					return g.DataPoints[0].Value
				}
			}
		}
		return -1
	}
	if n := held(); n != 1 {
		t.Errorf("held gauge %d, want 1", n)
	}

	if code, body := f.do("POST", "/v1/approvals/traced-1/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK {
		t.Fatalf("approve = %d %v", code, body)
	}
	if r := f.wait("traced-1"); r.IsError {
		t.Fatalf("result %+v", r)
	}
	m, err := releases.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if got := m.Header.Get(layout.HeaderTraceparent); got != want {
		t.Errorf("release traceparent %q, want the call's %q", got, want)
	}

	var hold sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "approval_hold pay" {
			hold = s
		}
	}
	if hold == nil {
		t.Fatal("no approval_hold span")
	}
	if len(hold.Links()) != 1 || hold.Links()[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("hold span links %v, want the producer span %s", hold.Links(), send.SpanContext().SpanID())
	}
	if hold.Parent().IsValid() || hold.SpanContext().TraceID() == send.SpanContext().TraceID() {
		t.Error("the hold span should be a root of its own trace, linked to the call")
	}
	if !hold.StartTime().Equal(h.RequestedAt) || hold.EndTime().Before(hold.StartTime()) {
		t.Errorf("hold span %s → %s, want from the call's arrival %s", hold.StartTime(), hold.EndTime(), h.RequestedAt)
	}
	attrs := map[string]string{}
	for _, a := range hold.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["gen_ai.tool.call.id"] != "traced-1" || attrs["decision"] != "approved" {
		t.Errorf("hold span attributes %v", attrs)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == telemetry.MetricApprovalDecision {
				for _, p := range h.DataPoints {
					tool, _ := p.Attributes.Value(telemetry.Tool)
					dec, _ := p.Attributes.Value(telemetry.Decision)
					found = found || tool.AsString() == "pay" && dec.AsString() == "approved" && p.Count == 1
				}
			}
		}
	}
	if !found {
		t.Error("no decision latency point {tool=pay, decision=approved} with count 1")
	}
	if n := held(); n != 0 {
		t.Errorf("held gauge %d after the decision, want 0", n)
	}
}

// TestWebhookDeliveriesAreCounted records one delivered and two failed
// webhook attempts and reads the deliveries counter by outcome.
func TestWebhookDeliveriesAreCounted(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	f.stopSvc()
	f.cfg.MeterProvider = mp
	f.startService()
	for _, a := range []webhook.Attempt{
		{URL: "https://hooks.example/a", EventID: "msg_1", Number: 1, StatusCode: 503, Err: errors.New("503 Service Unavailable")},
		{URL: "https://hooks.example/a", EventID: "msg_1", Number: 2, Err: errors.New("connection refused")},
		{URL: "https://hooks.example/a", EventID: "msg_1", Number: 3, StatusCode: 204},
	} {
		if err := f.svc.RecordWebhookAttempt(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricWebhookDeliveries {
				for _, p := range s.DataPoints {
					o, _ := p.Attributes.Value(telemetry.Outcome)
					got[o.AsString()] = p.Value
				}
			}
		}
	}
	if got["delivered"] != 1 || got["failed"] != 2 {
		t.Errorf("webhook deliveries %v, want delivered 1 and failed 2", got)
	}
}
