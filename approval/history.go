package approval

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxHistory bounds the audit entries [Service.History] returns for one
// call (the first ones: a call edited thousands of times is truncated).
const MaxHistory = 1000

// historyScan bounds the audit entries read to find the history of a call
// held before the index existed (no audit_ids): at most this many from
// its request time on.
const historyScan = 10000

// History returns the audit entries of one held call, oldest first, at
// most MaxHistory of them (truncated reports that there were more). They
// are read through the call's own index (see the package doc, "Redis
// layout"); entries past the retention are gone. ErrNotFound for a call
// not held.
func (s *Service) History(ctx context.Context, id string) (events []AuditEvent, truncated bool, err error) {
	return s.store.history(ctx, id)
}

// history reads the entries of call id through its audit_ids. A call held
// before the index existed has none: its entries are looked for among the
// historyScan entries written from a minute before its request (Redis's
// clock and the service's may differ a little).
func (s *store) history(ctx context.Context, id string) ([]AuditEvent, bool, error) {
	vals, err := s.rc.HMGet(ctx, s.callKey(id), "status", "audit_ids", "requested_ms").Result()
	if err != nil {
		return nil, false, fmt.Errorf("approval: history of %q: %w", id, err)
	}
	if vals[0] == nil {
		return nil, false, fmt.Errorf("%w: %q", errNotFound, id)
	}
	ids, _ := vals[1].(string)
	if ids == "" {
		requested, _ := vals[2].(string)
		return s.scanHistory(ctx, id, requested)
	}
	entries := strings.Fields(ids)
	truncated := len(entries) > MaxHistory
	entries = entries[:min(len(entries), MaxHistory)]
	pipe := s.rc.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(entries))
	for i, e := range entries {
		cmds[i] = pipe.XRangeN(ctx, s.auditKey(), e, e, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, false, fmt.Errorf("approval: history of %q: %w", id, err)
	}
	out := make([]AuditEvent, 0, len(entries))
	for _, c := range cmds {
		for _, m := range c.Val() { // none: trimmed past the retention
			out = append(out, auditEvent(m))
		}
	}
	return out, truncated, nil
}

// scanHistory is history for a call without an index: bounded, see
// historyScan.
func (s *store) scanHistory(ctx context.Context, id, requestedMS string) ([]AuditEvent, bool, error) {
	start := "-"
	if ms, err := strconv.ParseInt(requestedMS, 10, 64); err == nil && ms > 0 {
		start = strconv.FormatInt(ms-time.Minute.Milliseconds(), 10)
	}
	msgs, err := s.rc.XRangeN(ctx, s.auditKey(), start, "+", historyScan).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("approval: history of %q: %w", id, err)
	}
	var out []AuditEvent
	for _, m := range msgs {
		if m.Values["call_id"] == id && len(out) < MaxHistory {
			out = append(out, auditEvent(m))
		}
	}
	return out, len(msgs) == historyScan, nil
}
