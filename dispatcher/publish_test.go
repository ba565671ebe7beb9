package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/layout"
)

// TestSubmitOutlastsAStreamOutage deletes the calls stream, submits a call,
// and brings the stream back a second later: the dispatcher keeps trying
// the publish (the same message id, so a repeat cannot queue the call twice)
// until the stream accepts it, within the call's deadline, instead of
// failing the call at the first unanswered attempt.
func TestSubmitOutlastsAStreamOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.advertiseUnserved(greet().Spec())
	js := e.JetStream()
	if err := js.DeleteStream(t.Context(), layout.CallsStream); err != nil {
		t.Fatal(err)
	}
	const outage = time.Second
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		time.Sleep(outage) // the outage itself, not a wait for an event
		if err := layout.EnsureStreams(context.Background(), js, layout.CallsConfig(layout.StreamOptions{})); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	id, err := e.d.Submit(ctx, "greet", map[string]any{"name": "ada"}, dispatcher.AllowNoWorker())
	if err != nil {
		t.Fatalf("Submit during a %s outage of the calls stream: %v", outage, err)
	}
	if took := time.Since(start); took < outage/2 {
		t.Errorf("Submit returned after %s, before the stream could be back", took)
	}
	s, err := js.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("the calls stream holds %d messages after the retried publish of %s, want 1", info.State.Msgs, id)
	}
	st, err := e.d.Status(t.Context(), id)
	if err != nil || st.State != dispatcher.StateQueued {
		t.Errorf("Status(%s) = %+v, %v; want queued", id, st, err)
	}
}
