package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/limits"
)

// WithKey names the caller the call is counted for by the fleet's limits
// (see package limits): a tenant, an API key's name. Default:
// limits.DefaultKey, shared by every caller that names none. It is a
// metric label: name callers, not requests.
func WithKey(key string) CallOption { return func(o *callOptions) { o.key = key } }

// admission applies Config.Limits before a call is published: it holds
// the slots of the calls admitted here until their results reach this
// instance (see package limits).
type admission struct {
	cfg      limits.Config
	enforcer *limits.Enforcer // nil: no limits at all
	slots    sync.Map         // call id -> *heldSlot
	// openUntil (Unix ns) is when Redis is asked again after it failed:
	// until then calls are admitted unchecked, at once.
	openUntil atomic.Int64
	closed    atomic.Bool // no slot is freed from here after close: it lapses

	rules sync.Map     // ruleKey -> *rule: Config.Limits resolved for one tool × key
	tools sync.Map     // tool -> *seenCount: the tool cap's use as last seen
	swept atomic.Int64 // when idle rules were last forgotten (Unix ns; see sweepRules)
}

// ruleKey names a rule.
type ruleKey struct{ tool, key string }

// rule is what admission needs of one tool × key, resolved from
// Config.Limits on the first call, not on every one.
type rule struct {
	limit   limits.Limit
	toolMax int
	key     *seenCount   // the key's cap's use as last seen
	tool    *seenCount   // the tool's, shared by its keys' rules
	used    atomic.Int64 // when a call last looked it up (Unix ns)
}

// ruleIdle is how long a rule goes unused before a sweep forgets it: a
// dispatcher serving many keys in turn would otherwise keep one for every
// tool × key it ever saw. Forgetting one is safe at any moment: a held
// slot keeps its own counts (heldSlot.taken), and a rule made again has
// no fresh count, so its first call asks Redis, which counts every slot
// this dispatcher queued (an ask writes them first).
const ruleIdle = time.Minute

// ruleOf is the rule of tool × key, forgetting idle rules when a sweep is
// due (at most once a ruleIdle, on the calling goroutine).
func (a *admission) ruleOf(tool, key string, now time.Time) *rule {
	a.sweepRules(now)
	k := ruleKey{tool, key}
	v, ok := a.rules.Load(k)
	if !ok {
		t, _ := a.tools.LoadOrStore(tool, new(seenCount))
		fresh := &rule{limit: a.cfg.For(tool, key), toolMax: a.cfg.ToolMaxQueued(tool), key: new(seenCount), tool: t.(*seenCount)}
		fresh.used.Store(now.UnixNano()) // before it is seen: a sweep under way keeps it
		v, _ = a.rules.LoadOrStore(k, fresh)
	}
	r := v.(*rule)
	if at := now.UnixNano(); at-r.used.Load() >= int64(time.Second) {
		r.used.Store(at) // at most once a second: the calls of one key share it
	}
	return r
}

// sweepRules forgets the rules unused for ruleIdle, if a sweep is due.
func (a *admission) sweepRules(now time.Time) {
	last := a.swept.Load()
	if now.UnixNano()-last < int64(ruleIdle) || !a.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	a.rules.Range(func(k, v any) bool {
		if now.UnixNano()-v.(*rule).used.Load() >= int64(ruleIdle) {
			a.rules.CompareAndDelete(k, v)
		}
		return true
	})
}

// seenCount is how many calls held a slot under one cap when Redis last
// said, and how many this instance admitted since without asking.
type seenCount struct {
	mu    sync.Mutex
	held  int       // as Redis last said
	since int       // admitted here without asking, not in held yet
	at    time.Time // when Redis said it
}

// freshFor is how long a count Redis gave is trusted to admit without
// asking.
const freshFor = time.Second

// fits reports whether a call may be admitted under capacity without
// asking: the cap is off, or the count is fresh and, with the calls
// admitted here since and this one, at most a quarter of the cap (see
// package limits, "Admission without waiting"). c.mu is held.
func (c *seenCount) fits(capacity int, now time.Time) bool {
	return capacity <= 0 || (!c.at.IsZero() && now.Sub(c.at) < freshFor && 4*(c.held+c.since+1) <= capacity)
}

// counted records a count Redis gave: for a call it decided, or for the
// batch in which a call admitted here without asking would have taken
// its slot, had it not ended first (its take undone, and counted out by
// settled already). The calls admitted here since stay counted: their
// slots are not in it, or are and their takes' answers are still to
// come (counting them twice for that moment errs on the cap's side).
func (c *seenCount) counted(held int, now time.Time) {
	c.mu.Lock()
	c.held, c.at = held, now
	c.mu.Unlock()
}

// recorded records a count Redis gave once one of the calls admitted
// here without asking took its slot: that call is in held now.
func (c *seenCount) recorded(held int, now time.Time) {
	c.mu.Lock()
	c.held, c.at = held, now
	c.since = max(c.since-1, 0)
	c.mu.Unlock()
}

// settled forgets a call admitted here without asking whose slot will
// not be recorded: it could not be, or the call ended before it was.
func (c *seenCount) settled() {
	c.mu.Lock()
	c.since = max(c.since-1, 0)
	c.mu.Unlock()
}

// claim counts a call admitted without asking if there is room for it
// under capacity (see fits), in one step: calls that find room at the
// same moment cannot all take it.
func (c *seenCount) claim(capacity int, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fits(capacity, now) {
		return false
	}
	c.since++
	return true
}

// claimRoom claims room under the key's cap and then the tool's, or
// neither.
func claimRoom(key *seenCount, keyCap int, tool *seenCount, toolCap int, now time.Time) bool {
	if !key.claim(keyCap, now) {
		return false
	}
	if !tool.claim(toolCap, now) {
		key.settled()
		return false
	}
	return true
}

// admitTimeout bounds one admission check: Redis answers in well under a
// millisecond, so one that takes longer is treated as unreachable.
const admitTimeout = 500 * time.Millisecond

// failOpenFor is how long calls are admitted unchecked after Redis could
// not be asked, before it is asked again: an outage costs one slow check
// a second, not one per call.
const failOpenFor = time.Second

// heldSlot is a slot this instance took for a call, until lapse.
type heldSlot struct {
	slot  *limits.Slot
	lapse time.Time
	taken [2]*seenCount // the key's and the tool's counts, for a slot taken without asking
}

// slotHeldHeader is the value of the slot header of every call that
// holds a slot and whose caller does not wait for it (Submit); shared,
// never modified.
var slotHeldHeader = []string{layout.SlotHeld}

// slotHeaderReserve is the room the slot header takes in a call message.
const slotHeaderReserve = len(layout.HeaderSlot) + len(layout.SlotHeld) + len(": \r\n")

// slotGrace is how long past its deadline a call's slot lapses when no
// result frees it: as resultGrace, by when no worker still runs it.
const slotGrace = resultGrace

// newAdmission returns the admission of cfg over enforcer (nil: none).
func newAdmission(cfg limits.Config, enforcer *limits.Enforcer) *admission {
	return &admission{cfg: cfg, enforcer: enforcer}
}

// close waits for the slots taken and freed to be written; a result that
// comes later (its subscription's last callback) frees nothing.
func (a *admission) close() {
	a.closed.Store(true)
	if a.enforcer != nil {
		a.enforcer.Wait()
	}
}

// unlimited reports that no admission limit applies to any call (the
// calls stream's bound still may).
func unlimited(c limits.Config) bool {
	return len(c.Tools) == 0 && len(c.Keys) == 0 && c.Default.Rate.IsZero() &&
		c.Default.MaxInFlight == limits.NoLimit && c.MaxQueued == limits.NoLimit
}

// admit decides whether p may be published now. A refusal is a
// *windlass.CallError (rate_limited or overloaded, with a retry-after);
// an admitted call may hold a slot (p.held). While Redis cannot be asked
// the call is admitted: admission limits fail open (see package limits).
func (d *Dispatcher) admit(ctx context.Context, p *prepared) error {
	a := d.admission
	if a.enforcer == nil {
		return nil
	}
	tool, key := p.call.Name, p.key()
	now := time.Now()
	r := a.ruleOf(tool, key, now)
	l, toolMax, keyCount, toolCount := r.limit, r.toolMax, r.key, r.tool
	if l.Rate.IsZero() && l.MaxInFlight <= 0 && toolMax <= 0 {
		return nil
	}
	if now.UnixNano() < a.openUntil.Load() {
		d.metrics.Unenforced(ctx, tool)
		return nil
	}
	lapse := p.call.Deadline.Add(slotGrace)
	if !p.ownID && !p.opts.detached && claimRoom(keyCount, l.MaxInFlight, toolCount, toolMax, now) {
		// Far from both caps as last seen, and its room claimed: its slot
		// is recorded behind it (queued before it is published, so before
		// its result can free it, and before any later ask of this
		// dispatcher), and only its rate, if any, is asked. Only for a
		// random id: one the caller chose may be a resubmit, whose slot
		// is its first submit's. And only for a call this dispatcher
		// frees itself: a submitted call's slot is freed by whoever
		// stores its answer, which may come before a queued record is
		// written, so its slot is written before it is published.
		slot, ok := a.enforcer.Take(tool, key, p.call.ID, lapse, func(t limits.Taken) {
			at := time.Now()
			switch {
			case t.Undone: // its call ended first: settled at its free
				if t.Err == nil {
					keyCount.counted(t.KeyInFlight, at)
					toolCount.counted(t.ToolInFlight, at)
				}
			case t.Err != nil: // the count goes stale, and a call after it asks
				keyCount.settled()
				toolCount.settled()
			default:
				keyCount.recorded(t.KeyInFlight, at)
				toolCount.recorded(t.ToolInFlight, at)
			}
		})
		if ok {
			h := &heldSlot{slot: slot, lapse: lapse, taken: [2]*seenCount{keyCount, toolCount}}
			if !l.Rate.IsZero() {
				dec, asked := d.ask(ctx, tool, key, func(ctx context.Context) (limits.Decision, error) { return a.enforcer.Charge(ctx, tool, key, l.Rate) })
				if !asked || !dec.Allowed {
					a.free(h) // admitted unchecked, or refused: it holds no slot
				}
				if !asked {
					return nil
				}
				if !dec.Allowed {
					d.metrics.Limited(ctx, tool, key, string(dec.Reason))
					return refusedByLimit(tool, key, dec, l, toolMax)
				}
			}
			p.held = h
			a.slots.Store(p.call.ID, p.held)
			return nil
		}
		// Too many records waiting: its slot is taken by asking.
		keyCount.settled()
		toolCount.settled()
	}
	admitIt := func(ctx context.Context) (limits.Decision, error) {
		return a.enforcer.Admit(ctx, tool, key, p.call.ID, lapse, l, toolMax)
	}
	dec, asked := d.ask(ctx, tool, key, admitIt)
	if !asked {
		return nil
	}
	if dec.Held {
		// The id holds a slot, and publish found no record of its call
		// before asking: another submit of it may be being admitted this
		// moment, and its rate may yet refuse it, or its caller leave
		// (either way its slot is then freed). Admitted at once, without
		// a slot or a charge, this one would queue a call the other was
		// told was not queued, or run without a slot once the other's was
		// freed. So the call's record is waited for — found, the other
		// was accepted and this is the same call — else admission is
		// asked again: a slot still held then is a settled submit's (its
		// publish unconfirmed, or its record unreadable now), and this
		// is the same call, admitted without a second slot or charge, as
		// the answer to that submit said it would be.
		if _, ok := d.recordOf(ctx, p.call.ID, true); ok {
			return nil // the same call, admitted before: no second slot or charge
		}
		if dec, asked = d.ask(ctx, tool, key, admitIt); !asked || dec.Held {
			return nil
		}
	}
	if dec.KeyInFlight > 0 || dec.ToolInFlight > 0 {
		at := time.Now()
		keyCount.counted(dec.KeyInFlight, at)
		toolCount.counted(dec.ToolInFlight, at)
	}
	if !dec.Allowed {
		d.metrics.Limited(ctx, tool, key, string(dec.Reason))
		return refusedByLimit(tool, key, dec, l, toolMax)
	}
	if dec.Slot != nil {
		p.held = &heldSlot{slot: dec.Slot, lapse: lapse}
		a.slots.Store(p.call.ID, p.held)
	}
	return nil
}

// ask asks Redis through check, bounded by admitTimeout; asked is false
// when it could not, and the call is then admitted unchecked (admission
// limits fail open), as every call is for failOpenFor after.
func (d *Dispatcher) ask(ctx context.Context, tool, key string, check func(context.Context) (limits.Decision, error)) (dec limits.Decision, asked bool) {
	checkCtx, cancel := context.WithTimeout(ctx, admitTimeout)
	dec, err := check(checkCtx)
	cancel()
	if err == nil {
		return dec, true
	}
	d.metrics.Unenforced(ctx, tool)
	if ctx.Err() == nil {
		d.admission.openUntil.Store(time.Now().Add(failOpenFor).UnixNano())
		d.cfg.Logger.WarnContext(ctx, "dispatcher: limits could not be checked; calls are admitted unchecked for a second (admission limits fail open)", "tool", tool, "key", key, "error", err)
	}
	return limits.Decision{}, false
}

// refusedByLimit is the refusal of a call dec did not admit.
func refusedByLimit(tool, key string, dec limits.Decision, l limits.Limit, toolMax int) *windlass.CallError {
	after := max(dec.RetryAfter, time.Millisecond).Round(time.Millisecond)
	var code windlass.ErrorCode
	var why string
	switch dec.Reason {
	case limits.ReasonRate:
		code, why = windlass.CodeRateLimited, fmt.Sprintf("key %q is over its rate for tool %q (%s)", key, tool, l.Rate)
	case limits.ReasonInFlight:
		code, why = windlass.CodeRateLimited, fmt.Sprintf("key %q already has %d calls of tool %q queued or running, its limit", key, l.MaxInFlight, tool)
	default:
		code, why = windlass.CodeOverloaded, fmt.Sprintf("tool %q already has %d calls queued or running, its limit for all callers together", tool, toolMax)
	}
	return &windlass.CallError{Code: code, Retryable: true, RetryAfterMS: after.Milliseconds(), Message: fmt.Sprintf(
		"The call was not queued: %s. Try again after %s.", why, after)}
}

// unadmit frees the slot p took when p was not published after all, or
// is not the call stored under its id (which held no slot).
func (d *Dispatcher) unadmit(p *prepared) {
	if p.held != nil && d.admission.slots.CompareAndDelete(p.call.ID, p.held) {
		d.admission.free(p.held)
	}
	p.held = nil
}

// key is the call's key: its own, or the shared default.
func (p *prepared) key() string {
	if p.call.Key == "" {
		return limits.DefaultKey
	}
	return p.call.Key
}

// keyOf is the key opts name, for counting a call refused before it was
// prepared.
func keyOf(opts []CallOption) string {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.key == "" {
		return limits.DefaultKey
	}
	return o.key
}

// ended frees the slot of a call whose result reached this instance. It
// does so even when the one that stored the result freed it too (see
// layout.HeaderSlot): a slot taken without asking is written behind its
// call, so that other free may have come first, and this one, written
// after this instance's take, is the one sure to undo it.
func (a *admission) ended(callID string) {
	if v, ok := a.slots.LoadAndDelete(callID); ok {
		a.free(v.(*heldSlot))
	}
}

// free frees a slot, without waiting (see limits.Enforcer.Free). A slot
// taken without asking whose take was not written yet is undone, and its
// call counted out of the calls admitted here at once: it will never be
// in the counts Redis gives.
func (a *admission) free(h *heldSlot) {
	if a.closed.Load() || !a.enforcer.Free(h.slot) {
		return
	}
	for _, c := range h.taken {
		if c != nil {
			c.settled()
		}
	}
}

// expire forgets the slots that lapsed by now: Redis dropped them already.
func (a *admission) expire(now time.Time) {
	a.slots.Range(func(k, v any) bool {
		if now.After(v.(*heldSlot).lapse) {
			a.slots.CompareAndDelete(k, v)
		}
		return true
	})
}
