package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/dispatcher"
)

// stalledJS never acknowledges (and never stores) the first publish of a
// call: it waits until its context ends, as a publish to an unreachable
// server does.
type stalledJS struct {
	jetstream.JetStream
	once atomic.Bool
}

func (s *stalledJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, "windlass.call.") && s.once.CompareAndSwap(false, true) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.JetStream.PublishMsg(ctx, m, opts...)
}

// TestAResubmitAfterAnUnconfirmedPublishIsAccepted: a submit whose
// publish was not confirmed (its client gave up while NATS did not answer)
// is answered unavailable, "submit it again with this call id: the same id
// is the same call, run once". The call was in fact never stored. The
// caller does as told, NATS healthy again: the resubmit is accepted and
// the call runs, once. (With default limits, the first submit's slot holds
// the id until the call's deadline and a minute, and the resubmit finds it
// held with no record behind it; at 7a8b85b it was refused unavailable for
// as long. Found by a review helper.)
func TestAResubmitAfterAnUnconfirmedPublishIsAccepted(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	add := countingAdd(&runs)
	e := newEnv(t, add)
	dispatcher.WrapJetStream(e.d, func(js jetstream.JetStream) jetstream.JetStream { return &stalledJS{JetStream: js} })

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	_, err := e.d.Submit(ctx, "add", `{"a":1,"b":2}`, dispatcher.WithCallID("u-1"), dispatcher.WithTimeout(time.Minute))
	cancel()
	if !errors.Is(err, dispatcher.ErrUnavailable) {
		t.Fatalf("first submit = %v; want unavailable (unconfirmed)", err)
	}
	t.Logf("first submit: %v", err)

	for i := range 3 {
		_, err = e.d.Submit(t.Context(), "add", `{"a":1,"b":2}`, dispatcher.WithCallID("u-1"), dispatcher.WithTimeout(time.Minute))
		t.Logf("resubmit %d: %v", i, err)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("resubmit of the never-stored call, as the answer said to = %v; want accepted", err)
	}
	if r, err := e.d.Wait(waitCtx(t, 10*time.Second), "u-1"); err != nil || r.Content != "3" {
		t.Fatalf("the call's result = %+v, %v; want 3", r, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; want once", n)
	}
}
