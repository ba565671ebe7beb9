package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestADeadlineWithTheResultUnreadableIsNotATimeout: a tool answers while
// its caller's dispatcher has lost its connection (closed here: the
// dispatcher cannot read a thing), and the call's deadline passes. The
// caller is told unavailable, with ErrUnavailable, not that the tool timed
// out: the tool answered, and the answer is there for the asking. Before,
// any failure of the last look at the results stream made the call a
// timeout.
func TestADeadlineWithTheResultUnreadableIsNotATimeout(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	started, answer := make(chan struct{}), make(chan struct{})
	f.StartWorker(worker.Config{}, windlass.MustFunc("slow", func(ctx context.Context, _ struct{}) (string, error) {
		close(started)
		<-answer
		return "done", nil
	}))
	conn := f.Conn()
	d := f.Dispatcher(dispatcher.Config{Conn: conn})
	fleettest.WaitCatalog(t, d, "slow")

	got := make(chan answered, 1)
	go func() {
		r, err := d.Call(context.Background(), "slow", struct{}{}, dispatcher.WithTimeout(5*time.Second))
		got <- answered{r, err}
	}()
	select {
	case <-started:
	case a := <-got:
		t.Fatalf("Call = %+v, %v before the tool started", a.r, a.err)
	}
	conn.Close()
	close(answer)
	a := <-got
	if a.r.Error == nil || a.r.Error.Code != windlass.CodeUnavailable || !errors.Is(a.err, dispatcher.ErrUnavailable) {
		t.Fatalf("Call = %+v, %v; want unavailable: whether the tool answered could not be read", a.r, a.err)
	}
	// It did answer: another dispatcher reads the tool's result.
	other := f.Dispatcher(dispatcher.Config{})
	if r, err := other.Result(t.Context(), a.r.CallID); err != nil || r.IsError || r.Content != "done" {
		t.Errorf("Result(%s) = %+v, %v; want the tool's answer", a.r.CallID, r, err)
	}
}

// answered is what Call returned.
type answered struct {
	r   windlass.ToolResult
	err error
}

// TestAPublishWhoseAckIsLostIsNotARefusal: the call reaches the stream and
// runs, but its publish's acknowledgement never reaches the dispatcher,
// whose connection then closes. Call says unavailable and gives the call's
// id, saying the call may be queued and may run — not that the fleet could
// not accept it, which would have the caller run it again under a new id.
// The id answers: the tool's result is there. Before, the result said "The
// fleet could not accept the call" and carried no id.
func TestAPublishWhoseAckIsLostIsNotARefusal(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	started := make(chan struct{})
	f.StartWorker(worker.Config{}, windlass.MustFunc("once", func(ctx context.Context, _ struct{}) (string, error) {
		close(started)
		return "done", nil
	}))
	dialer := &fleettest.DeafDialer{}
	conn := f.NATS.Connect(t, nats.SetCustomDialer(dialer))
	d := f.Dispatcher(dispatcher.Config{Conn: conn})
	fleettest.WaitCatalog(t, d, "once")

	dialer.Deafen() // from now on the dispatcher hears nothing
	got := make(chan answered, 1)
	go func() {
		r, err := d.Call(context.Background(), "once", struct{}{}, dispatcher.WithTimeout(time.Minute))
		got <- answered{r, err}
	}()
	select {
	case <-started: // stored and run: only its acknowledgement is lost
	case a := <-got:
		t.Fatalf("Call = %+v, %v before the tool ran", a.r, a.err)
	}
	conn.Close()
	a := <-got
	r := a.r
	if r.Error == nil || r.Error.Code != windlass.CodeUnavailable || r.CallID == "" || strings.Contains(r.Content, "could not accept") || !errors.Is(a.err, dispatcher.ErrUnavailable) {
		t.Fatalf("Call = %+v, %v; want unavailable with the call's id, not a refusal", r, a.err)
	}
	other := f.Dispatcher(dispatcher.Config{})
	res, err := other.Wait(t.Context(), r.CallID)
	if err != nil || res.Content != "done" {
		t.Errorf("Wait(%s) = %+v, %v; want the tool's answer", r.CallID, res, err)
	}
}
