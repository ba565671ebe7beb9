package approval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/retry"
)

// queue is one consumer of the audit events: a consumer group of its own
// on the audit stream, so that one slow queue (a webhook endpoint that
// does not answer) holds back no other.
type queue struct {
	group  string
	notify func(ctx context.Context, ev AuditEvent, call *HeldCall) error
}

// queues are Config.Notify's queue (group "notify") and one per endpoint
// of Config.Webhooks (group "webhook:" and the first 16 hex digits of the
// SHA-256 of its URL, which may carry a secret).
func (c Config) queues() []queue {
	var qs []queue
	if c.Notify != nil {
		qs = append(qs, queue{group: "notify", notify: c.Notify})
	}
	if c.Webhooks != nil {
		for _, url := range c.Webhooks.URLs() {
			sum := sha256.Sum256([]byte(url))
			qs = append(qs, queue{group: "webhook:" + hex.EncodeToString(sum[:8]), notify: webhookNotify(c.Webhooks, url)})
		}
	}
	return qs
}

// defaultReplica names a replica's consumer: its host name (a pod's name in
// Kubernetes) and a random suffix, so that two processes never share one.
func defaultReplica() string {
	host, _ := os.Hostname()
	return strings.ReplaceAll(host, " ", "_") + "-" + strings.ToLower(rand.Text()[:8])
}

// notifyBatch is how many entries a replica takes from a queue at once:
// one, so that the replicas share the events and a replica that dies holds
// one event mid-delivery, not a batch.
const notifyBatch = 1

// notifyLoop hands audit events to q, through q's consumer group on the
// audit stream, as this replica's consumer (Config.Replica). An event is
// acknowledged only after q succeeded, so events survive a restart, and a
// receiver that is down gets every event once it is back. Each entry is
// read by one replica; while it delivers, the replica renews its claim on
// the entry (heartbeat), and an entry whose replica stopped renewing for
// Config.ClaimAfter (it died mid-delivery) is claimed by another, which
// delivers it again.
//
// The queue's group exists before the loop starts: see ensureGroups.
func (s *Service) notifyLoop(ctx context.Context, q queue) {
	waits := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Waits()
	own := true // read this consumer's own pending entries first
	var lastClaim time.Time
	for ctx.Err() == nil {
		var (
			msgs []redis.XMessage
			err  error
		)
		if own {
			// Entries this consumer read but did not acknowledge (a failed
			// delivery) come before new ones.
			msgs, err = s.readEvents(ctx, q.group, "0", 32)
			own = len(msgs) > 0
		}
		if err == nil && len(msgs) == 0 && time.Since(lastClaim) >= s.cfg.ClaimAfter/2 {
			lastClaim = time.Now()
			msgs, err = s.claimAbandoned(ctx, q.group)
		}
		if err == nil && len(msgs) == 0 {
			msgs, err = s.readEvents(ctx, q.group, ">", notifyBatch)
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, redis.Nil) {
				s.cfg.Logger.WarnContext(ctx, "approval: reading events failed", "group", q.group, "error", err)
				retry.Sleep(ctx, waits.Next())
				if redis.HasErrorPrefix(err, "NOGROUP") {
					// The group went with Redis's data (restarted empty,
					// flushed): every entry the stream holds now came
					// after and none was delivered, so the new group
					// starts at the stream's beginning (groupsScript).
					if err := s.recreateGroup(ctx, q.group); err != nil && ctx.Err() == nil {
						s.cfg.Logger.ErrorContext(ctx, "approval: cannot create the notification group; retrying", "group", q.group, "error", err)
					}
				}
			}
			continue
		}
		for _, m := range msgs {
			if err := s.deliverEvent(ctx, q, m); err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.WarnContext(ctx, "approval: notification failed; retrying", "group", q.group, "entry", m.ID, "error", err)
					retry.Sleep(ctx, waits.Next())
				}
				own = true // retry this entry before new ones
				break
			}
			waits.Reset()
		}
	}
}

// ensureGroups creates every queue's consumer group that does not exist,
// retrying while Redis cannot be reached, until ctx ends, and records the
// queues (groupsScript). It runs before the first event this service
// appends: before Run takes a call in, and before a decision (a service
// that serves its API before Run got this far, or that never runs). An
// event appended before its queue's group was created would lie behind
// the group's start and never be delivered.
func (s *Service) ensureGroups(ctx context.Context) error {
	if s.groupsMade.Load() {
		return nil
	}
	select {
	case s.groupsTurn <- struct{}{}:
		defer func() { <-s.groupsTurn }()
	case <-ctx.Done():
		return fmt.Errorf("approval: notification groups: %w", ctx.Err())
	}
	if s.groupsMade.Load() {
		return nil
	}
	var groups []string
	for _, q := range s.cfg.queues() {
		groups = append(groups, q.group)
	}
	waits := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Waits()
	for {
		err := s.createGroups(ctx, groups...)
		if err == nil {
			s.groupsMade.Store(true)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("approval: notification groups: %w", err)
		}
		s.cfg.Logger.WarnContext(ctx, "approval: cannot create the notification groups; retrying", "groups", groups, "error", err)
		retry.Sleep(ctx, waits.Next())
	}
}

// groupsScript creates the audit stream's consumer groups that do not
// exist and records every queue in a hash beside the stream (its "*" field
// says the stream's queues are recorded). At a start (ARGV[1] "start") a
// group is created at the stream's end ("$") only when the record is there
// and does not name it: a queue new to a deployment starts with the events
// after it, not the history. Any other missing group was lost with Redis's
// data (restarted empty, failed over to a replica without it) or is the
// first ever, and starts at the stream's beginning: every entry there came
// after the loss, or there are none. A group a reader found gone (ARGV[1]
// "lost") starts at the beginning whatever the record says: another
// queue's recovery may have written the record since the loss. (A
// deployment from before the record is taken for one that lost it: a
// queue added at that very upgrade is sent the history.)
// KEYS: stream, record. ARGV: "start" or "lost", then the groups.
var groupsScript = redis.NewScript(`
local recorded = ARGV[1] == 'start' and redis.call('HEXISTS', KEYS[2], '*') == 1
for i = 2, #ARGV do
  local start = '0'
  if recorded and redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then start = '$' end
  local r = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[i], start, 'MKSTREAM')
  if type(r) == 'table' and r.err and string.sub(r.err, 1, 9) ~= 'BUSYGROUP' then return r end
  redis.call('HSET', KEYS[2], ARGV[i], '1')
end
redis.call('HSET', KEYS[2], '*', '1')
return 1
`)

// createGroups runs groupsScript for groups at a start (ensureGroups).
func (s *Service) createGroups(ctx context.Context, groups ...string) error {
	return s.runGroups(ctx, "start", groups)
}

// recreateGroup runs groupsScript for a group its reader found gone.
func (s *Service) recreateGroup(ctx context.Context, group string) error {
	return s.runGroups(ctx, "lost", []string{group})
}

func (s *Service) runGroups(ctx context.Context, mode string, groups []string) error {
	args := make([]any, 0, 1+len(groups))
	args = append(args, mode)
	for _, g := range groups {
		args = append(args, g)
	}
	return groupsScript.Run(ctx, s.cfg.Redis, []string{s.store.auditKey(), s.store.queuesKey()}, args...).Err()
}

// deliverEvent hands one entry to q, renewing this replica's claim on it
// while q runs, and acknowledges it once q succeeded. An entry trimmed from
// the stream (past the retention) is acknowledged without a delivery.
func (s *Service) deliverEvent(ctx context.Context, q queue, m redis.XMessage) error {
	rc, key := s.cfg.Redis, s.store.auditKey()
	if len(m.Values) > 0 {
		ev := auditEvent(m)
		h, _ := s.store.get(ctx, ev.CallID)
		hctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { s.heartbeat(hctx, q.group, m.ID) })
		err := q.notify(ctx, ev, h)
		stop()
		wg.Wait()
		if err != nil {
			return err
		}
	}
	if err := rc.XAck(ctx, key, q.group, m.ID).Err(); err != nil && ctx.Err() == nil {
		// Delivered; the entry stays pending and is delivered again (the
		// receiver dedupes by webhook-id).
		s.cfg.Logger.WarnContext(ctx, "approval: acknowledging a delivered event failed", "group", q.group, "entry", m.ID, "error", err)
	}
	return nil
}

// renewScript resets the idle time of a pending entry if this consumer
// still owns it (another replica may have claimed it, taking this one for
// dead): what keeps a live replica's entry from being claimed.
// KEYS: stream. ARGV: group, consumer, entry id.
var renewScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if p[1] == nil or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
`)

// heartbeat renews this replica's claim on entry id every third of
// Config.ClaimAfter until ctx ends.
func (s *Service) heartbeat(ctx context.Context, group, id string) {
	t := time.NewTicker(s.cfg.ClaimAfter / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := renewScript.Run(ctx, s.cfg.Redis, []string{s.store.auditKey()}, group, s.cfg.Replica, id).Err(); err != nil && ctx.Err() == nil {
			s.cfg.Logger.WarnContext(ctx, "approval: renewing the claim on an event failed", "group", group, "entry", id, "error", err)
		}
	}
}

// claimAbandoned takes over entries another consumer read and stopped
// renewing for Config.ClaimAfter (its replica died), and forgets consumers
// that hold nothing and were not seen for a long while (replicas gone for
// good; a live one is re-created by its next read).
func (s *Service) claimAbandoned(ctx context.Context, group string) ([]redis.XMessage, error) {
	rc, key := s.cfg.Redis, s.store.auditKey()
	msgs, _, err := rc.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: key, Group: group, Consumer: s.cfg.Replica, MinIdle: s.cfg.ClaimAfter, Start: "0-0", Count: notifyBatch,
	}).Result()
	if err != nil {
		return nil, err
	}
	if consumers, err := rc.XInfoConsumers(ctx, key, group).Result(); err == nil {
		for _, c := range consumers {
			if c.Pending == 0 && c.Idle > forgetConsumer && c.Name != s.cfg.Replica {
				rc.XGroupDelConsumer(ctx, key, group, c.Name)
			}
		}
	}
	return msgs, nil
}

// forgetConsumer is how long a consumer with nothing pending may go unseen
// before it is removed from its group.
const forgetConsumer = time.Hour

func (s *Service) readEvents(ctx context.Context, group, from string, count int64) ([]redis.XMessage, error) {
	block := time.Duration(-1) // no BLOCK for the pending list
	if from == ">" {
		block = time.Second
	}
	res, err := s.cfg.Redis.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: s.cfg.Replica, Streams: []string{s.store.auditKey(), from}, Count: count, Block: block,
	}).Result()
	if err != nil || len(res) == 0 {
		return nil, err
	}
	return res[0].Messages, nil
}
