package integration_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestUpgradeFromProtocol1 starts a protocol 2 fleet on the streams of a
// protocol 1 fleet, with a call still queued there the protocol 1 way (one
// subject per tool): the calls stream is migrated on start (per-call
// subjects added, direct gets allowed, the old subject kept), the old call
// runs once and its caller gets its answer, and new calls run as usual —
// their status read from the call message while queued, and from the
// result, queued time and deadline included, once finished.
func TestUpgradeFromProtocol1(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	js := f.JetStream()
	ctx := t.Context()

	old := layout.CallsConfig(layout.StreamOptions{})
	old.Subjects, old.AllowDirect, old.Description = []string{"windlass.call.*"}, false, "a protocol 1 calls stream"
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	nc := f.Conn()
	answers := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(layout.ResultInbox("olddispatcher"), answers)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: layout.LegacyCallSubject("greet"),
		Data:   []byte(`{"id":"queued-by-v1","name":"greet","arguments":{"name":"ada"}}`),
		Header: nats.Header{nats.MsgIdHdr: []string{"queued-by-v1"}, layout.HeaderOrigin: []string{"olddispatcher"}, layout.HeaderProtocol: []string{"1"}}}); err != nil {
		t.Fatal(err)
	}

	var runs atomic.Int64
	greet := windlass.MustFunc("greet", func(ctx context.Context, in struct {
		Name string `json:"name"`
	}) (string, error) {
		runs.Add(1)
		return "hello " + in.Name, nil
	})
	f.StartWorker(worker.Config{}, greet)
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "greet")

	select {
	case m := <-answers:
		var r windlass.ToolResult
		if err := json.Unmarshal(m.Data, &r); err != nil || r.CallID != "queued-by-v1" || r.Content != "hello ada" {
			t.Errorf("the protocol 1 call's answer = %s (%v)", m.Data, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call queued by protocol 1 was not answered within 30s")
	}
	s, err := js.Stream(ctx, layout.CallsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect || !slices.Contains(cfg.Subjects, layout.CallSubjects) || !slices.Contains(cfg.Subjects, "windlass.call.*") {
		t.Errorf("the migrated calls stream: subjects %q, direct gets %v; want both layouts' subjects, direct gets on", cfg.Subjects, cfg.AllowDirect)
	}
	if cfg.Description != old.Description {
		t.Errorf("the migration changed the stream's description to %q", cfg.Description)
	}

	// A new call, queued while no worker takes it, then run.
	stopped := make(chan struct{})
	blocker := windlass.MustFunc("hold", func(ctx context.Context, in struct{}) (string, error) {
		<-stopped
		return "done", nil
	})
	f.StartWorker(worker.Config{}, fleettest.WithToolOptions(blocker, worker.WithConcurrency(1)))
	fleettest.WaitCatalog(t, d, "greet", "hold")
	first, err := d.Submit(ctx, "hold", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := d.Submit(ctx, "hold", `{}`, dispatcher.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Status(ctx, queued)
	if err != nil || st.State != dispatcher.StateQueued || st.Tool != "hold" || st.QueuedAt.IsZero() || st.Deadline.IsZero() {
		t.Errorf("Status of a queued call = %+v, %v; want queued, with its tool, queued time and deadline", st, err)
	}
	close(stopped)
	for _, id := range []string{first, queued} {
		if r, err := d.Wait(waitFor(t, 30*time.Second), id); err != nil || r.Content != "done" {
			t.Fatalf("Wait(%s) = %+v, %v", id, r, err)
		}
	}
	fin, err := d.Status(ctx, queued)
	if err != nil || fin.State != dispatcher.StateFinished || !fin.QueuedAt.Equal(st.QueuedAt) || !fin.Deadline.Equal(st.Deadline) {
		t.Errorf("Status of the finished call = %+v, %v; want finished, queued at %s, deadline %s as while it was queued", fin, err, st.QueuedAt, st.Deadline)
	}
	if r, err := d.Call(ctx, "greet", `{"name":"bo"}`); err != nil || r.Content != "hello bo" {
		t.Errorf("a new call = %+v, %v", r, err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("greet ran %d times, want 2 (the old call once, the new once)", n)
	}
}

// waitFor is a context for a wait of at most d.
func waitFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
