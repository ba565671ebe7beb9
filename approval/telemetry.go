package approval

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/telemetry"
)

// ended records a hold that just ended with status: the decision latency,
// and the hold as a span of its own, from the call's arrival to now,
// linked to the call's trace (a hold may outlive the process that took the
// call in, so it is recorded when it ends, with its true start).
func (s *Service) ended(ctx context.Context, h *HeldCall, status Status) {
	now := time.Now()
	s.metrics.Decided(ctx, h.Tool, string(status), now.Sub(h.RequestedAt))
	if !s.tracer.Enabled() {
		return
	}
	opts := []trace.SpanStartOption{
		trace.WithTimestamp(h.RequestedAt),
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			telemetry.CallID.String(h.ID),
			telemetry.GenAIToolName.String(h.Tool),
			telemetry.GenAIToolCallID.String(h.ID),
			telemetry.Decision.String(string(status)),
		),
	}
	if sc, ok := telemetry.RemoteSpanContext(nats.Header{layout.HeaderTraceparent: []string{h.traceparent}}); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := s.tracer.Start(context.WithoutCancel(ctx), telemetry.HoldSpanName(h.Tool), opts...)
	if status != StatusApproved {
		telemetry.SetError(span, string(status), "the held call was "+string(status))
	}
	span.End(trace.WithTimestamp(now))
}

// countPending counts the held calls pending a decision.
func (s *store) countPending(ctx context.Context) (int64, error) {
	return s.rc.ZCard(ctx, s.pendingKey()).Result()
}

// summaryLimit bounds the held calls a summary reads.
const summaryLimit = 10000

// answerSummary replies to a summary request with the pending held calls
// by tool: {"pending": {"<tool>": n}, "truncated": bool}.
func (s *Service) answerSummary(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), retry.ReadTimeout)
	defer cancel()
	pending := map[string]int{}
	reply := map[string]any{"pending": pending}
	for offset := int64(0); offset < summaryLimit; offset += 500 {
		page, err := s.store.list(ctx, StatusPending, offset, 500)
		if err != nil {
			reply = map[string]any{"error": err.Error()}
			break
		}
		for _, h := range page {
			pending[h.Tool]++
		}
		if len(page) < 500 {
			break
		}
		if offset+500 >= summaryLimit {
			reply["truncated"] = true
		}
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}
