package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

// consumerConfig reads the tool's shared consumer's configuration.
func (b *bench) consumerConfig(tool string) jetstream.ConsumerConfig {
	b.t.Helper()
	c, err := b.js.Consumer(b.t.Context(), layout.CallsStream, layout.ConsumerName(tool))
	if err != nil {
		b.t.Fatal(err)
	}
	return c.CachedInfo().Config
}

// TestConsumerKeepsTheFirstWorkersSettings: two workers of a tool with
// different ack waits: the tool's consumer keeps the first's, the second
// logs the setting with both values and serves on the existing consumer;
// a worker with UpdateConsumer rewrites it.
func TestConsumerKeepsTheFirstWorkersSettings(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	b.start(worker.Config{AckWait: 2 * time.Second}, countingEcho(&runs))
	if got := b.consumerConfig("echo").AckWait; got != 2*time.Second {
		t.Fatalf("the first worker's consumer has ack wait %s, want 2s", got)
	}

	var logs testserver.Buffer
	_, stopSecond := b.start(worker.Config{AckWait: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, countingEcho(&runs))
	// b.start saw the first worker pulling; the second serves once it logs so.
	fleettest.WaitFor(t, fleettest.StartTimeout, "the second worker serving", func() bool { return strings.Contains(logs.String(), "worker: serving") })
	if got := b.consumerConfig("echo").AckWait; got != 2*time.Second {
		t.Errorf("after a second worker with ack wait 5s the consumer has %s, want the first's 2s", got)
	}
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "setting=ack_wait") {
			line = l
		}
	}
	for _, want := range []string{"level=WARN", "tool=echo", "setting=ack_wait", "existing=2s", "own=5s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the second worker's warning %q does not say %s; logs:\n%s", line, want, logs.String())
		}
	}
	stopSecond()
	b.publish(windlass.ToolCall{ID: "served", Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)})
	if r := b.result(10 * time.Second); r.IsError || r.Content != "hi" {
		t.Errorf("result = %+v", r)
	}

	b.start(worker.Config{AckWait: 3 * time.Second, UpdateConsumer: true}, countingEcho(&runs))
	fleettest.WaitFor(t, fleettest.StartTimeout, "a worker with UpdateConsumer rewrote the ack wait", func() bool {
		return b.consumerConfig("echo").AckWait == 3*time.Second
	})
}

// TestConsumerFiltersFollowTheStream: on a calls stream migrated from
// protocol 1, a consumer created with the protocol 1 subject among its
// filters is narrowed to the protocol 2 subject by the next worker once no
// call waits on the old subject, while its other settings stay its
// creator's.
func TestConsumerFiltersFollowTheStream(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	ctx := t.Context()
	if err := b.js.DeleteStream(ctx, layout.CallsStream); err != nil {
		t.Fatal(err)
	}
	old := layout.CallsConfig(layout.StreamOptions{})
	old.Subjects, old.AllowDirect = []string{"windlass.call.*"}, false
	if _, err := b.js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(ctx, b.js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.CreateConsumer(ctx, layout.CallsStream, jetstream.ConsumerConfig{
		Durable:        layout.ConsumerName("echo"),
		FilterSubjects: []string{layout.CallsOfTool("echo"), layout.LegacyCallSubject("echo")},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        2 * time.Second,
		MaxDeliver:     -1,
		MaxAckPending:  20000,
	}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	b.start(worker.Config{AckWait: 4 * time.Second}, countingEcho(&runs))
	cfg := b.consumerConfig("echo")
	if got := append([]string{cfg.FilterSubject}, cfg.FilterSubjects...); !slices.Contains(got, layout.CallsOfTool("echo")) || slices.Contains(got, layout.LegacyCallSubject("echo")) {
		t.Errorf("filters = %q, want only %s", got, layout.CallsOfTool("echo"))
	}
	if cfg.AckWait != 2*time.Second {
		t.Errorf("ack wait = %s, want the creator's 2s", cfg.AckWait)
	}
	b.publish(windlass.ToolCall{ID: "after", Name: "echo", Arguments: json.RawMessage(`{"text":"narrowed"}`)})
	if r := b.result(10 * time.Second); r.IsError || r.Content != "narrowed" {
		t.Errorf("result = %+v", r)
	}
}

// TestWorkerFollowsAShorterConsumerAckWait: a worker whose ack wait (12 s)
// is longer than its tool's consumer's (2 s, its creator's) sends its
// in-progress acks within the consumer's, so a call running 2.5 times that
// is not redelivered.
func TestWorkerFollowsAShorterConsumerAckWait(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.createConsumer("slow", 2*time.Second)
	// 12 s: in-progress acks every 4 s, past the consumer's 2 s, unless
	// the worker follows it.
	b.longCallRunsOnce(worker.Config{AckWait: 12 * time.Second}, "the worker's in-progress acks did not follow the consumer's ack wait")
}

// TestRunStoppedWhileStartingIsNoFailure: a worker whose context ends
// while it starts (here, before) returns nil, as after any stop it was
// asked for; before, it returned the context's error from whichever step
// it was in — an UpdateConsumer worker stopped while its update was on
// its way failed TestConsumerKeepsTheFirstWorkersSettings in a loaded run.
func TestRunStoppedWhileStartingIsNoFailure(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	w, err := worker.New(worker.Config{JetStream: b.js, UpdateConsumer: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(countingEcho(&runs)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run with its context ended = %v; want nil", err)
	}
}
