package mcpserver

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionIDHeader names the session of a request in MCP's streamable HTTP
// transport.
const sessionIDHeader = "Mcp-Session-Id"

// sessionEndedError is the cause a call's wait ends with when the client's
// session ends (deleted by the client, or expired).
type sessionEndedError struct{ why string }

func (e *sessionEndedError) Error() string { return "the MCP session ended: " + e.why }

// session is what the handler knows of one MCP session.
//
// The SDK cannot tell a session's end to the calls it is waiting for: its
// ServerSession.Close (the end of a DELETE, and of its own idle timeout)
// waits for the tool handlers in progress and cancels none, and a POST
// whose connection drops leaves its handler running. So the handler keeps
// this record beside the SDK's: the requests of the session in progress,
// for its idle timeout, and the calls it waits for, to cancel when it ends.
type session struct {
	id        string
	user      string // the user that created it (auth.TokenInfo), as the SDK checks it
	userKnown bool
	open      int         // requests of the session in progress (POST, GET)
	idle      *time.Timer // runs while open is 0
	gen       uint64      // counts changes of idle, so that a stale expiry does nothing
	ended     string      // why it ended; "" while it is live
	waiters   map[*waiter]struct{}
}

// waiter is one tools/call request waiting for a call of the fleet.
type waiter struct {
	callID  string
	session *session // nil when the session is not tracked
	cancel  context.CancelCauseFunc
	counted bool // its submit was accepted: among the call's waiters (sessions.calls)
	left    bool
}

// callWaits are the requests, of any session, for one call id.
type callWaits struct {
	accepted int    // waiting for the call: their submits were accepted
	pending  int    // still submitting: each may join the call, or be refused
	owed     string // why the last waiter to leave canceling left the call to the pending ones; "" none
}

// sessions tracks the handler's sessions and the calls they wait for.
type sessions struct {
	timeout time.Duration
	onIdle  func(s *session, gen uint64) // runs when s has been idle for timeout

	mu       sync.Mutex
	closed   bool
	byID     map[string]*session
	calls    map[string]*callWaits // call id -> its waiters, in all sessions
	expiring sync.WaitGroup        // expiries under way
}

func (ss *sessions) init(timeout time.Duration, onIdle func(*session, uint64)) {
	ss.timeout, ss.onIdle = timeout, onIdle
	ss.byID, ss.calls = map[string]*session{}, map[string]*callWaits{}
}

// add records a new session, idle until its first request.
func (ss *sessions) add(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return
	}
	s := &session{id: id, waiters: map[*waiter]struct{}{}}
	ss.byID[id] = s
	ss.armLocked(s)
}

// created notes the user whose initialize request created session id (the
// one the SDK holds the session's later requests to).
func (ss *sessions) created(id, user string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.byID[id]; s != nil && !s.userKnown {
		s.user, s.userKnown = user, true
	}
}

// begin counts a request of session id in progress: the session is not
// idle until the matching end. It returns nil for a session it does not
// know (the SDK answers it), and ended for one that ended.
func (ss *sessions) begin(id string) (s *session, ended bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s = ss.byID[id]
	switch {
	case s == nil:
		return nil, false
	case s.ended != "":
		return nil, true
	}
	s.open++
	ss.disarmLocked(s)
	return s, false
}

// end counts a request of s done; the last one starts its idle timeout.
func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.open--
	ss.armLocked(s)
}

func (ss *sessions) armLocked(s *session) {
	if ss.closed || s.open > 0 || s.ended != "" {
		return
	}
	ss.disarmLocked(s)
	gen := s.gen
	s.idle = time.AfterFunc(ss.timeout, func() { ss.onIdle(s, gen) })
}

func (ss *sessions) disarmLocked(s *session) {
	s.gen++
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
}

// endLocked marks s ended and returns the waiters to cancel.
func (ss *sessions) endLocked(s *session, why string) []*waiter {
	s.ended = why
	ss.disarmLocked(s)
	ws := make([]*waiter, 0, len(s.waiters))
	for w := range s.waiters {
		ws = append(ws, w)
	}
	return ws
}

// endByClient ends session id at its client's request (DELETE), when user
// may end it: the SDK refuses a DELETE by another user than the one that
// created the session, and then no call is canceled either.
func (ss *sessions) endByClient(id, user, why string) (*session, []*waiter) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[id]
	if s == nil || s.ended != "" || s.userKnown && s.user != "" && s.user != user {
		return nil, nil
	}
	return s, ss.endLocked(s, why)
}

// expire ends s, idle since the expiry numbered gen was armed, unless a
// request came since. The caller calls ss.expiring.Done once ok.
func (ss *sessions) expire(s *session, gen uint64, why string) (ws []*waiter, ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed || s.gen != gen || s.open > 0 || s.ended != "" {
		return nil, false
	}
	ss.expiring.Add(1)
	return ss.endLocked(s, why), true
}

// forget drops an ended session's record, once the SDK closed it.
func (ss *sessions) forget(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.byID[s.id] == s {
		delete(ss.byID, s.id)
	}
}

// join records w as a wait of session id for its call. It fails once the
// session ended: the call must not be submitted.
func (ss *sessions) join(id string, w *waiter, user string) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.byID[id]; s != nil {
		if s.ended != "" {
			return &sessionEndedError{why: s.ended}
		}
		if !s.userKnown {
			s.user, s.userKnown = user, true
		}
		s.waiters[w] = struct{}{}
		w.session = s
	}
	cw := ss.calls[w.callID]
	if cw == nil {
		cw = &callWaits{}
		ss.calls[w.callID] = cw
	}
	cw.pending++
	return nil
}

// accepted counts w among the waiters for its call once its submit was
// accepted. Until then it is pending: a request whose submit is refused
// (another call has the id, the tool has no worker) never waits for the
// call, and must not keep another's cancellation from canceling it — nor
// may a retry still submitting lose the call to it (see leaveCanceling).
// An accepted request takes the call over from a cancellation left owed.
func (ss *sessions) accepted(w *waiter) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if w.left || w.counted {
		return
	}
	w.counted = true
	cw := ss.calls[w.callID]
	cw.pending--
	cw.accepted++
	cw.owed = ""
}

// leaveCanceling ends w's wait, which would cancel its call (the client
// canceled, its session ended, its bound passed), and reports whether to
// cancel it now: no other request waits for it. While another is still
// submitting, the cancellation is owed: that request takes the call over
// if its submit is accepted, and cancels it with why if refused (leave).
func (ss *sessions) leaveCanceling(w *waiter, why string) (cancelNow bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if w.left {
		return false
	}
	cw := ss.leaveLocked(w)
	switch {
	case !w.counted || cw.accepted > 0:
		return false
	case cw.pending > 0:
		cw.owed = why
		return false
	}
	delete(ss.calls, w.callID)
	return true
}

// leave ends w's wait, whatever became of it. owed is the reason of a
// cancellation owed to the call (see leaveCanceling) when w was the last
// request for it: its caller cancels the call with it.
func (ss *sessions) leave(w *waiter) (owed string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if w.left {
		return ""
	}
	cw := ss.leaveLocked(w)
	if cw.accepted > 0 || cw.pending > 0 {
		return ""
	}
	delete(ss.calls, w.callID)
	return cw.owed
}

// leaveLocked takes w out of its session and of its call's count.
func (ss *sessions) leaveLocked(w *waiter) *callWaits {
	w.left = true
	if w.session != nil {
		delete(w.session.waiters, w)
	}
	cw := ss.calls[w.callID]
	if w.counted {
		cw.accepted--
	} else {
		cw.pending--
	}
	return cw
}

// close stops every idle timeout and waits for the expiries under way.
func (ss *sessions) close() {
	ss.mu.Lock()
	ss.closed = true
	for _, s := range ss.byID {
		ss.disarmLocked(s)
	}
	ss.mu.Unlock()
	ss.expiring.Wait()
}

// newSession names a new session for the SDK (ServerOptions.GetSessionID)
// and starts tracking it.
func (h *Handler) newSession() string {
	id := rand.Text()
	h.sessions.add(id)
	return id
}

// endSession ends session id at its client's request: the calls it waits
// for are canceled (their waits end with a sessionEndedError, and each
// cancels its call in the fleet), before the SDK closes the session.
func (h *Handler) endSession(id, user, why string) *session {
	s, ws := h.sessions.endByClient(id, user, why)
	if s == nil {
		return nil
	}
	h.cfg.Logger.Debug("mcpserver: session ended", "session_id", id, "reason", why, "calls", len(ws))
	for _, w := range ws {
		w.cancel(&sessionEndedError{why: why})
	}
	return s
}

// expire ends a session that stayed idle for Config.SessionTimeout: its
// calls are canceled, then the SDK's session closed (which waits for the
// calls' requests to return) and forgotten. A session the SDK closed on
// its own (one whose initialization failed: the go-sdk client's first
// request probes for a newer protocol) is only forgotten.
func (h *Handler) expire(s *session, gen uint64) {
	why := fmt.Sprintf("expired after %v idle", h.cfg.SessionTimeout)
	ws, ok := h.sessions.expire(s, gen, why)
	if !ok {
		return
	}
	defer h.sessions.expiring.Done()
	defer h.sessions.forget(s)
	var live *mcp.ServerSession
	for ms := range h.server.Sessions() {
		if ms.ID() == s.id {
			live = ms
			break
		}
	}
	if live == nil && len(ws) == 0 {
		return
	}
	log := h.cfg.Logger.With("session_id", s.id, "reason", why)
	log.Debug("mcpserver: session ended", "calls", len(ws))
	for _, w := range ws {
		w.cancel(&sessionEndedError{why: why})
	}
	if live != nil {
		_ = live.Close()
	}
	log.Debug("mcpserver: session closed")
}

// userOf is the authenticated user of a request, as the SDK sees it.
func userOf(ctx context.Context) string {
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		return ti.UserID
	}
	return ""
}
