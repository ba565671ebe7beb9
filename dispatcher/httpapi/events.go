package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
)

// Event is one server-sent event of GET /v1/calls/{id}/events: the event's
// kind is the SSE event name, and this its data.
type Event struct {
	windlass.Event
	// Result is the call's result, on the finished event.
	Result *windlass.ToolResult `json:"result,omitempty"`
}

// callEvents is GET /v1/calls/{id}/events: the call's events as
// server-sent events (queued, started, progress, retrying), then finished
// carrying the result, after which the stream ends. The stream follows
// the call until its deadline (and a little after); a wait that ends
// without a result ends the stream with an "error" event, code
// unavailable, never timeout (a call that timed out finishes with its
// timeout result). Each event is
// flushed as it comes; an idle stream gets a comment every KeepAlive.
// Streams are bounded per API key and per process (429 beyond); the
// dispatcher's consumer of a stream is deleted when the stream ends.
func (h *Handler) callEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	release, refused := h.streams.acquire(keyName(r))
	if refused != "" {
		writeError(w, CodeTooManyStreams, refused)
		return
	}
	defer release() // after Watch returned, its consumer deleted
	st, err := h.cfg.Dispatcher.Status(r.Context(), id)
	switch {
	case err != nil:
		h.unavailable(w, r, id, err)
		return
	case st.State == dispatcher.StateUnknown:
		writeError(w, CodeUnknownCall, fmt.Sprintf("the fleet has no record of call %q (never accepted, or past the retention window)", id))
		return
	}
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if err := s.flush(); err != nil {
		return
	}

	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	defer context.AfterFunc(h.draining, stop)()
	var wg sync.WaitGroup
	wg.Go(func() { s.keepAlive(ctx, h.cfg.KeepAlive) })
	defer wg.Wait()
	defer stop() // runs before wg.Wait

	// The stream follows the call until its own deadline, and a little
	// after, by when the fleet has answered it (timeout, if nothing
	// else) — not the dispatcher's MaxWait, which a long call or a gated
	// one waiting for a person outlasts.
	watchCtx := ctx
	if !st.Deadline.IsZero() {
		var cancel context.CancelFunc
		watchCtx, cancel = context.WithDeadline(ctx, st.Deadline.Add(streamPastDeadline))
		defer cancel()
	}
	for e, err := range h.cfg.Dispatcher.Watch(watchCtx, id) {
		if err != nil {
			if ctx.Err() == nil {
				// Never timeout: that is the call's own answer, which a
				// finished event carries. The stream's wait ended first.
				msg := err.Error()
				if errors.Is(err, context.DeadlineExceeded) {
					msg = fmt.Sprintf("The stream ended before the call's result came; the call may still be queued or running: reconnect, or ask for call %s's status (%v).", id, err)
				}
				_ = s.event("error", ErrorBody{Error: windlass.CallError{Code: windlass.CodeUnavailable, Message: msg}})
			}
			return
		}
		if err := s.event(string(e.Kind), Event{Event: e, Result: e.Result}); err != nil {
			return // the client went away
		}
	}
}

// streamPastDeadline is how long an event stream follows a call past its
// deadline: its timeout answer is stored by then.
const streamPastDeadline = 10 * time.Second

// sseWriter writes server-sent events; the keep-alive goroutine and the
// handler share it.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseWriter) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rc.Flush()
}

// event writes one event and flushes it.
func (s *sseWriter) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data)
	return s.write(b.Bytes())
}

func (s *sseWriter) write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(p); err != nil {
		return err
	}
	return s.rc.Flush()
}

// keepAlive writes a comment line every interval until ctx ends.
func (s *sseWriter) keepAlive(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.write([]byte(": keep-alive\n\n")) != nil {
				return
			}
		}
	}
}
