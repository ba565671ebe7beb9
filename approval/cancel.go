package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
)

// cancels is the service's view of the cancels stream: a handle kept once
// it was found, for the check on the decision path.
type cancels struct {
	mu     sync.Mutex
	stream jetstream.Stream
}

// followCancels applies every cancellation of the cancels stream, from its
// start, to the calls the service holds, through an ordered consumer (which
// survives reconnects and server restarts on its own). A cancellation of a
// call held pending marks it canceled and answers its caller; any other is
// a no-op, so every replica of the service may follow the stream. stop
// ends the consumer and waits for its handler.
func (s *Service) followCancels(ctx context.Context) (stop func(), err error) {
	cons, err := s.js.OrderedConsumer(ctx, layout.CancelsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{layout.CancelSubjects},
	})
	if err != nil {
		return nil, fmt.Errorf("approval: follow cancellations: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		rec, err := decodeCancellation(m.Subject(), m.Data())
		if err != nil {
			s.cfg.Logger.WarnContext(ctx, "approval: unreadable cancellation ignored", "subject", m.Subject(), "error", err)
			return
		}
		s.applyCancel(ctx, rec)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.cfg.Logger.DebugContext(ctx, "approval: following cancellations", "error", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("approval: follow cancellations: %w", err)
	}
	return func() { cc.Stop(); <-cc.Closed() }, nil
}

// decodeCancellation reads a cancellation record and checks that it is
// filed under its own call's subject.
func decodeCancellation(subject string, data []byte) (windlass.Cancellation, error) {
	var rec windlass.Cancellation
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("decode: %w", err)
	}
	if err := windlass.ValidateCallID(rec.CallID); err != nil {
		return rec, fmt.Errorf("call_id: %w", err)
	}
	if layout.CancelSubject(rec.CallID) != subject {
		return rec, fmt.Errorf("call_id %q does not belong on subject %s", rec.CallID, subject)
	}
	return rec, nil
}

// applyCancel marks a pending held call canceled, once, and answers its
// caller canceled (the dispatcher that recorded the cancellation has
// answered already; the results stream keeps the first answer). It
// reports whether the call was pending and is canceled now. A Redis failure
// is retried a few times within ctx; should it last, the check on the
// decision path and the expiry still keep the call from running.
func (s *Service) applyCancel(ctx context.Context, rec windlass.Cancellation) bool {
	changed, err := retry.Value(ctx, retry.Policy{Initial: 100 * time.Millisecond, Attempts: 4}, func(ctx context.Context) (bool, error) {
		return s.store.cancel(ctx, rec.CallID, rec.Reason, time.Now())
	})
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "approval: could not apply a cancellation", "call_id", rec.CallID, "error", err)
		return false
	}
	if !changed {
		return false
	}
	s.cfg.Logger.InfoContext(ctx, "approval: held call canceled by its caller", "call_id", rec.CallID, "reason", rec.Reason)
	if h, err := s.store.get(ctx, rec.CallID); err == nil {
		s.ended(ctx, h, StatusCanceled)
		s.answerDecision(ctx, h, answerRetry)
	}
	return true
}

// cancelIfRecorded looks up a cancellation of call id in the cancels
// stream and applies it, and reports whether the call was pending and is
// canceled now. A decision checks first, so that one made before the
// follower has seen a cancellation cannot release the call; so does the
// intake of a call, which may arrive after its cancellation did. A failed
// look-up is logged and the caller goes on: a worker answers a released
// call that was canceled without running it.
func (s *Service) cancelIfRecorded(ctx context.Context, id string) bool {
	stream, err := s.cancelsStream(ctx)
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "approval: cannot check the call for a cancellation", "call_id", id, "error", err)
		return false
	}
	m, err := stream.GetLastMsgForSubject(ctx, layout.CancelSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "approval: cannot check the call for a cancellation", "call_id", id, "error", err)
		return false
	}
	rec, err := decodeCancellation(m.Subject, m.Data)
	if err != nil || rec.CallID != id {
		return false
	}
	return s.applyCancel(ctx, rec)
}

// cancelsStream returns the cancels stream's handle, looked up once.
func (s *Service) cancelsStream(ctx context.Context) (jetstream.Stream, error) {
	s.cancels.mu.Lock()
	defer s.cancels.mu.Unlock()
	if s.cancels.stream != nil {
		return s.cancels.stream, nil
	}
	stream, err := s.js.Stream(ctx, layout.CancelsStream)
	if err != nil {
		return nil, fmt.Errorf("approval: cancels stream: %w", err)
	}
	s.cancels.stream = stream
	return stream, nil
}
