package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

// TestARedeliveryALiveHolderStillRunsIsLeftToIt: a worker (the holder)
// runs a long call when its link to NATS is cut for longer than the ack
// wait, so the call is delivered again, to a second worker that has just
// reconnected itself (as after a NATS restart). The holder comes back, its
// tool still running. The second worker's settle window ends without an
// answer, and it used to run the call then, beside the holder, for
// something the holder did nothing wrong in. Now it asks the tool's
// workers, the holder answers that it holds the message, and the
// delivery is left to it: the tool runs once, and the holder's answer is
// the call's.
func TestARedeliveryALiveHolderStillRunsIsLeftToIt(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("slow", time.Second)
	var runs atomic.Int64
	started, finish := make(chan struct{}, 4), make(chan struct{})
	tool := windlass.MustFunc("slow", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-finish:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})

	link := newCutLink(t, b.nats.URL())
	hnc, err := nats.Connect(link.url(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hnc.Close)
	hjs, err := jetstream.New(hnc)
	if err != nil {
		t.Fatal(err)
	}
	b.start(worker.Config{JetStream: hjs, ID: "holder"}, tool, worker.WithConcurrency(1))
	seq := b.publishSeq(windlass.ToolCall{ID: "long-call", Name: "slow", Arguments: []byte(`{}`)})
	waitStarted(t, started, "the holder started the call")

	// The second worker, just reconnected: its settle window (its
	// reconnect wait and jitter plus 0.5 s) is open when the call comes.
	logs := &logLines{}
	snc := b.nats.Connect(t, nats.ReconnectWait(5*time.Second))
	sjs, err := jetstream.New(snc)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := b.start(worker.Config{JetStream: sjs, ID: "second", Logger: slog.New(logs)}, tool)
	if err := snc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the second worker reconnected and pulling", func() bool {
		info, err := cons.Info(t.Context())
		return snc.Stats().Reconnects > 0 && snc.IsConnected() && err == nil && info.NumWaiting > 0
	})

	link.cut()
	fleettest.WaitFor(t, 20*time.Second, "the call delivered again to the second worker, in its settle window", func() bool {
		return logs.contains("may still hold it") || runs.Load() > 1
	})
	link.restore()
	fleettest.WaitFor(t, 20*time.Second, "the holder back on its connection", func() bool {
		return hnc.Stats().Reconnects > 0 && hnc.IsConnected()
	})
	fleettest.WaitFor(t, 30*time.Second, "the second worker's window over: the delivery left alone, or run", func() bool {
		return second.Stats().LeftAlone > 0 || runs.Load() > 1
	})
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times; its holder was alive and still running it", n)
	}
	close(finish)
	b.callGone("slow", seq)
	if r, ok := b.storedResult("long-call"); !ok || r.Worker != "holder" || r.Attempt != 1 {
		t.Errorf("stored answer %+v (found %v); want the holder's, of attempt 1", r, ok)
	}
	if s := second.Stats(); s.LeftAlone != 1 {
		t.Errorf("second worker's stats %+v; want its delivery left alone", s)
	}
}

// TestAHolderThatFinishesWhileAskedIsNotRunAgain: the holder of a
// redelivered call finishes while the worker that took the redelivery asks
// whether it still holds it: it stores its answer, lets go of the message,
// and so answers nothing. The asking worker looks for the answer once more
// before it runs the call, finds it, and acks the call unrun.
func TestAHolderThatFinishesWhileAskedIsNotRunAgain(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cons := b.createConsumer("echo", 30*time.Second)
	const id = "finished-while-asked"
	seq := b.publishSeq(windlass.ToolCall{ID: id, Name: "echo", Arguments: []byte(`{"text":"again"}`)})
	holder := b.hold(cons)
	probes := b.heldProber("echo") // the holder, finishing: silent
	var runs atomic.Int64
	logs := &logLines{}
	w, _ := b.reconnectedWorkerWaiting(cons, worker.Config{Logger: slog.New(logs)}, countingEcho(&runs), 2*time.Second)
	b.redeliverWhileHeld(holder, logs, &runs)
	select {
	case <-probes:
	case <-time.After(30 * time.Second):
		t.Fatalf("no held probe within 30 s (the tool ran %d times)", runs.Load())
	}
	b.publishResult(windlass.ToolResult{CallID: id, Content: "the holder's answer", Attempt: 1, Worker: "holder"})

	b.callGone("echo", seq)
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times; its holder answered it", n)
	}
	if s := w.Stats(); s.AlreadyAnswered != 1 {
		t.Errorf("stats %+v; want the redelivery acked as already answered", s)
	}
}

func waitStarted(t *testing.T, started <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(fleettest.StartTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// cutLink is a TCP link to the NATS server that a test cuts (its
// connections closed, new ones refused) and restores: one client's network
// path going down, a fault the real server cannot show for one client
// alone.
type cutLink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func newCutLink(t *testing.T, natsURL string) *cutLink {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cutLink{ln: ln, target: u.Host}
	go l.accept()
	t.Cleanup(func() { _ = ln.Close(); l.cut() })
	return l
}

func (l *cutLink) url() string { return "nats://" + l.ln.Addr().String() }

func (l *cutLink) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, s)
		l.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

// cut closes the link's connections and refuses new ones until restore.
func (l *cutLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

func (l *cutLink) restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}

// TestAWorkerWithoutTheProbePermissionSaysSo: a worker whose NATS user
// may not use the held probes (an accounts.conf older than them) still
// serves its tools, as a worker of an older release would, and logs a
// warning naming the permission, instead of failing without a word to run
// redeliveries beside their holders.
func TestAWorkerWithoutTheProbePermissionSaysSo(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(`accounts: { A: { jetstream: enabled, users: [
  {user: old, password: old, permissions: {
    publish: {allow: [">"], deny: ["windlass.held.>"]},
    subscribe: {allow: [">"], deny: ["windlass.held.>"]}
  }}
] } }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := testserver.StartNATS(t, testserver.NATSOptions{ConfigFile: conf})
	js, err := jetstream.New(ns.Connect(t, nats.UserInfo("old", "old")))
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(layout.StreamOptions{})...); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	w, err := worker.New(worker.Config{JetStream: js, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	if err := w.Register(countingEcho(&runs)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	fleettest.WaitFor(t, fleettest.StartTimeout, "the worker serving and its warning logged", func() bool {
		return logs.contains("worker: serving") && logs.contains("may not subscribe to the held probes")
	})
}

// reconnectedWorkerOnLink starts a worker with cfg and tool whose
// connection goes through a cutLink and has just come back (forced to
// reconnect): its settle window is 10.6 s, outlasting a loaded machine's
// pauses (and the 5 s a pull request cut off by the reconnect may hold
// the next pull back), and it reconnects within 100 ms of a cut link's
// restore.
func (b *bench) reconnectedWorkerOnLink(cons jetstream.Consumer, cfg worker.Config, tool windlass.Tool) (*worker.Worker, *cutLink) {
	b.t.Helper()
	link := newCutLink(b.t, b.nats.URL())
	nc, err := nats.Connect(link.url(), nats.MaxReconnects(-1),
		nats.ReconnectWait(10*time.Second), nats.CustomReconnectDelay(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(nc.Close)
	if cfg.JetStream, err = jetstream.New(nc); err != nil {
		b.t.Fatal(err)
	}
	w, _ := b.start(cfg, tool)
	if err := nc.ForceReconnect(); err != nil {
		b.t.Fatal(err)
	}
	fleettest.WaitFor(b.t, 10*time.Second, "the worker reconnected and pulling", func() bool {
		info, err := cons.Info(b.t.Context())
		return nc.Stats().Reconnects > 0 && nc.IsConnected() && err == nil && info.NumWaiting > 0
	})
	return w, link
}
