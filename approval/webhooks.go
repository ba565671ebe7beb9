package approval

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/approval/webhook"
)

// webhookTypes maps audit events to the webhook event types the dashboard
// receives; other audit events (approval, approved, edited) are not sent.
// approval.approved is sent for the release that follows the approval, so
// that the call it carries says "released": true.
var webhookTypes = map[string]string{
	"requested":     "approval.requested",
	"released":      "approval.approved",
	"undeliverable": "approval.undeliverable",
	"rejected":      "approval.rejected",
	"expired":       "approval.expired",
	"canceled":      "approval.canceled",
}

// webhookNotify returns the queue function of the sender's endpoint url
// (see Config.Webhooks): it posts approval.requested, approval.approved,
// approval.undeliverable, approval.rejected, approval.expired and
// approval.canceled (the caller canceled the held call; actor "caller") to
// that endpoint, signed per Standard Webhooks. approval.approved comes
// once the approved call was released to its tool, naming as actor the
// reviewer whose approval decided it; approval.undeliverable instead when
// it never could be (its caller answered overloaded or payload_too_large:
// the call carries the code in "undeliverable"). The webhook-id is derived
// from the audit entry, so it stays the same across retries, restarts,
// replicas and endpoints. An event the sender gave up on (retries
// exhausted, endpoint gone) is logged by the sender and not retried again;
// an interrupted delivery (the replica stopping) is retried by this
// replica's next start or claimed by another replica.
func webhookNotify(sender *webhook.Sender, url string) func(context.Context, AuditEvent, *HeldCall) error {
	return func(ctx context.Context, ev AuditEvent, call *HeldCall) error {
		typ, ok := webhookTypes[ev.Event]
		if !ok {
			return nil
		}
		actor := ev.Actor
		if ev.Event == "released" && call != nil && len(call.Approvers) > 0 {
			actor = call.Approvers[len(call.Approvers)-1] // the approval that released it
		}
		data := map[string]any{"event_id": ev.ID, "call_id": ev.CallID, "actor": actor}
		if call != nil {
			data["call"] = call
		}
		r := sender.DeliverTo(ctx, url, webhook.Event{ID: "msg_" + strings.ReplaceAll(ev.ID, ".", "_"), Type: typ, Timestamp: auditTime(ev.ID), Data: data})
		if r.Err != nil && (errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded)) && ctx.Err() != nil {
			return r.Err
		}
		return nil
	}
}

// RecordWebhookAttempt appends one delivery attempt to the service's
// webhook log (<prefix>webhooks, a Redis stream capped at about 100,000
// entries), for webhook.Config.OnAttempt.
func (s *Service) RecordWebhookAttempt(ctx context.Context, a webhook.Attempt) error {
	s.metrics.Webhook(ctx, a.Err == nil && a.StatusCode >= 200 && a.StatusCode < 300)
	errText := ""
	if a.Err != nil {
		errText = a.Err.Error()
	}
	return s.cfg.Redis.XAdd(ctx, &redis.XAddArgs{
		Stream: s.store.webhooksKey(), MaxLen: 100000, Approx: true,
		Values: []any{"url", a.URL, "event_id", a.EventID, "attempt", a.Number, "status", a.StatusCode,
			"error", errText, "duration_ms", a.Duration.Milliseconds(), "next_delay_ms", a.NextDelay.Milliseconds()},
	}).Err()
}
