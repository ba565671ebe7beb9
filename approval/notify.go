package approval

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/retry"
)

const notifyGroup = "notify"

// notifyLoop hands every audit event, in order, to Config.Notify, through a
// Redis consumer group on the audit stream: an event is acknowledged only
// after Notify succeeded, so events survive a restart of the service and a
// dashboard that is down gets every event once it is back.
func (s *Service) notifyLoop(ctx context.Context) {
	rc, key := s.cfg.Redis, s.store.auditKey()
	if err := rc.XGroupCreateMkStream(ctx, key, notifyGroup, "0").Err(); err != nil && !isBusyGroup(err) {
		s.cfg.Logger.ErrorContext(ctx, "approval: cannot create the notification group", "error", err)
	}
	waits := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Waits()
	for ctx.Err() == nil {
		// "0" re-reads what was read but not acknowledged (a crash, a
		// failed Notify) before new events (">").
		msgs, err := s.readEvents(ctx, "0")
		if err == nil && len(msgs) == 0 {
			msgs, err = s.readEvents(ctx, ">")
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, redis.Nil) {
				s.cfg.Logger.WarnContext(ctx, "approval: reading events failed", "error", err)
				retry.Sleep(ctx, waits.Next())
			}
			continue
		}
		for _, m := range msgs {
			ev := auditEvent(m)
			h, _ := s.store.get(ctx, ev.CallID)
			if err := s.cfg.Notify(ctx, ev, h); err != nil {
				s.cfg.Logger.WarnContext(ctx, "approval: notification failed; retrying", "event", ev.Event, "call_id", ev.CallID, "error", err)
				retry.Sleep(ctx, waits.Next())
				break // keep the order: retry this event first
			}
			waits.Reset()
			rc.XAck(ctx, key, notifyGroup, m.ID)
		}
	}
}

func (s *Service) readEvents(ctx context.Context, from string) ([]redis.XMessage, error) {
	block := time.Duration(-1) // no BLOCK for the pending list
	if from == ">" {
		block = time.Second
	}
	res, err := s.cfg.Redis.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: notifyGroup, Consumer: "service", Streams: []string{s.store.auditKey(), from}, Count: 32, Block: block,
	}).Result()
	if err != nil || len(res) == 0 {
		return nil, err
	}
	return res[0].Messages, nil
}

func isBusyGroup(err error) bool {
	return err != nil && len(err.Error()) >= 9 && err.Error()[:9] == "BUSYGROUP"
}
