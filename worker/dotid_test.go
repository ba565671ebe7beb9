package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestACallWithADotIDIsAnswered: "." was a valid call id until it was
// refused as a URL's dot-segment; a dispatcher of before accepted it. A
// worker of now took the queued call for one whose id cannot be read and
// terminated it without an answer, where a malformed call whose id it can
// read is answered invalid_call: its caller heard nothing until the
// deadline and was then told the tool timed out (found by a review
// helper). It is answered invalid_call, saying why.
func TestACallWithADotIDIsAnswered(t *testing.T) {
	f := fleettest.New(t)
	f.StartWorker(worker.Config{}, windlass.MustFunc("echo", func(ctx context.Context, _ struct{}) (string, error) { return "ran", nil }))
	js := f.JetStream()
	calls, err := js.Stream(t.Context(), layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	for _, id := range []string{"ok-id", "."} {
		data := `{"id":"` + id + `","name":"echo","arguments":{},"deadline":"` + deadline + `"}`
		if id == "ok-id" {
			data = `{"id":"ok-id","name":"echo","arguments":[1],"deadline":"` + deadline + `"}` // malformed, id readable
		}
		m := &nats.Msg{Subject: layout.CallSubject("echo", id), Data: []byte(data), Header: nats.Header{
			nats.MsgIdHdr: {id}, layout.HeaderOrigin: {"old-dispatcher"}, layout.HeaderProtocol: {"2"}}}
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		fleettest.WaitFor(t, 30*time.Second, "the worker to settle "+id, func() bool {
			_, err := calls.GetLastMsgForSubject(t.Context(), layout.CallSubject("echo", id))
			return errors.Is(err, jetstream.ErrMsgNotFound)
		})
		results, _ := js.Stream(t.Context(), layout.ResultsStream)
		r, err := results.GetLastMsgForSubject(t.Context(), layout.ResultSubject("old-dispatcher", id))
		if err != nil {
			t.Errorf("call %q: no answer (%v): its caller waits until its deadline, then is told timeout", id, err)
			continue
		}
		t.Logf("call %q answered: %s", id, r.Data)
	}
}
