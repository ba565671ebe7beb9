package mcpserver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// dyingClient is an HTTP client whose connections can all be cut at once,
// as when the process of an MCP client dies: after kill, nothing it sends
// gets out — no cancellation, no DELETE.
type dyingClient struct {
	tr *http.Transport

	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func newDyingClient(t *testing.T) *dyingClient {
	d := &dyingClient{}
	d.tr = &http.Transport{DialContext: d.dial}
	t.Cleanup(func() { d.kill(); d.tr.CloseIdleConnections() })
	return d
}

func (d *dyingClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		c.Close()
		return nil, errors.New("the client's process is gone")
	}
	d.conns = append(d.conns, c)
	return c, nil
}

// kill closes every connection and refuses new ones.
func (d *dyingClient) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// transport is an SDK client transport through d. It never sends a
// DELETE: the client is one whose process dies without ending its session
// (the SDK client may close its session on its own when one of its
// connections fails, which a test of such a client must not race).
func (d *dyingClient) transport(url string) *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: noDelete{d.tr}}}
}

// noDelete is an HTTP transport that sends every request but a DELETE.
type noDelete struct{ http.RoundTripper }

func (n noDelete) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete {
		return nil, errors.New("the client's process is gone: it ends no session")
	}
	return n.RoundTripper.RoundTrip(r)
}

// callOutcome is what a tools/call made in the background returned.
type callOutcome struct {
	res *mcp.CallToolResult
	err error
}

// callInBackground calls a tool until ctx ends; the outcome comes on the
// returned channel.
func callInBackground(ctx context.Context, cs *mcp.ClientSession, tool string, args any, meta mcp.Meta) <-chan callOutcome {
	done := make(chan callOutcome, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
		done <- callOutcome{res, err}
	}()
	return done
}

// receive waits for an outcome.
func receive(t *testing.T, done <-chan callOutcome) callOutcome {
	t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(60 * time.Second):
		t.Fatal("the tools/call did not return within 60s")
		return callOutcome{}
	}
}

// progressTo is client options that pass progress notifications to ch.
func progressTo(ch chan *mcp.ProgressNotificationParams) *mcp.ClientOptions {
	return &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		select {
		case ch <- req.Params:
		default:
		}
	}}
}

// nextProgress waits for a progress notification.
func nextProgress(t *testing.T, ch chan *mcp.ProgressNotificationParams) *mcp.ProgressNotificationParams {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(30 * time.Second):
		t.Fatal("no progress notification within 30s")
		return nil
	}
}

// firstCallID is the call id in the first progress notification, which
// must name it.
func firstCallID(t *testing.T, ch chan *mcp.ProgressNotificationParams) string {
	t.Helper()
	p := nextProgress(t, ch)
	id, _ := p.Meta[mcpserver.MetaCallID].(string)
	if id == "" || !strings.Contains(p.Message, id) {
		t.Fatalf("first progress = %+v, want the call id in its _meta and its message", p)
	}
	return id
}

// held is the approval service's record of a held call.
func (a *approvals) held(id string) (status, reason string) {
	a.t.Helper()
	code, body := a.do("GET", "/v1/approvals/"+id, nil)
	if code != http.StatusOK {
		return fmt.Sprintf("HTTP %d", code), ""
	}
	status, _ = body["status"].(string)
	reason, _ = body["reason"].(string)
	return status, reason
}

// waitHeld waits until the approval service holds call id with status,
// and returns the record's reason.
func (a *approvals) waitHeld(id, status string) (reason string) {
	a.t.Helper()
	var got string
	fleettest.WaitFor(a.t, 30*time.Second, fmt.Sprintf("call %s %s at the approval service", id, status), func() bool {
		got, reason = a.held(id)
		return got == status
	})
	return reason
}

// payTool is a gated tool that counts its runs.
func payTool(runs *atomic.Int64) windlass.Tool {
	return windlass.MustFunc("pay", func(ctx context.Context, in payArgs) (string, error) {
		runs.Add(1)
		return fmt.Sprintf("paid %.2f to %s", in.Amount, in.To), nil
	}, windlass.WithApproval())
}

// logRecorder is a slog.Handler that keeps every message logged, with its
// attributes.
type logRecorder struct {
	attrs string // from WithAttrs
	log   *recordedLog
}

type recordedLog struct {
	mu   sync.Mutex
	msgs []string
}

func newLogRecorder() *logRecorder { return &logRecorder{log: &recordedLog{}} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	for _, a := range as {
		c.attrs += " " + a.String()
	}
	return &c
}
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	s := r.Time.Format("15:04:05.000000") + " " + r.Level.String() + " " + r.Message + l.attrs
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	l.log.msgs = append(l.log.msgs, s)
	return nil
}

// dumpIfFailed logs the handler's messages to a test that failed, for a
// failure seen once under load and not since.
func (l *logRecorder) dumpIfFailed(t *testing.T) {
	if !t.Failed() {
		return
	}
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	for _, m := range l.log.msgs {
		t.Log(m)
	}
}

// has reports whether a message logged contains every part.
func (l *logRecorder) has(parts ...string) bool {
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	for _, m := range l.log.msgs {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(m, p)
		}
		if all {
			return true
		}
	}
	return false
}

// A client that gives up on a held call and exits without a word (its
// request timed out, its process ended; no cancellation, no DELETE gets
// out): its session expires after the idle timeout, and the held call is
// canceled at the approval service, never run.
func TestClientGoneCancelsHeldCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	d := f.Dispatcher(dispatcher.Config{})
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	url := serve(t, mcpserver.Config{Dispatcher: d, SessionTimeout: 2 * time.Second, Logger: slog.New(logs)})
	dc := newDyingClient(t)
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	cs := connectTransport(t, progressTo(progress), dc.transport(url))

	ctx, giveUp := context.WithCancel(t.Context())
	defer giveUp()
	done := callInBackground(ctx, cs, "pay", payArgs{To: "bob", Amount: 5}, mcp.Meta{"progressToken": "p"})
	id := firstCallID(t, progress)
	apr.waitHeld(id, "pending")

	dc.kill()
	giveUp() // the client's timeout; its cancellation cannot get out
	receive(t, done)

	reason := apr.waitHeld(id, "canceled")
	if !strings.Contains(reason, "the MCP session ended: expired after 2s idle") {
		t.Errorf("cancel reason = %q, want the session's expiry", reason)
	}
	st, err := d.Status(t.Context(), id)
	if err != nil || st.State != dispatcher.StateFinished || st.Result.Code() != windlass.CodeCanceled {
		t.Errorf("status = %+v, %v; want finished, canceled", st, err)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times, want 0", n)
	}
}

// A client that deletes its session (HTTP DELETE, as the TypeScript SDK's
// terminateSession) while a call is held: the call is canceled at the
// approval service before the DELETE is answered, and never runs.
func TestDeletedSessionCancelsHeldCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	url := serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{}), Logger: slog.New(logs)})
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	cs := connect(t, url, progressTo(progress))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := callInBackground(ctx, cs, "pay", payArgs{To: "bob", Amount: 5}, mcp.Meta{"progressToken": "p"})
	id := firstCallID(t, progress)
	apr.waitHeld(id, "pending")

	req, err := http.NewRequest(http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("DELETE of the session: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE of the session = %d, want 204", resp.StatusCode)
	}

	reason := apr.waitHeld(id, "canceled")
	if !strings.Contains(reason, "the MCP session ended: deleted by the client") {
		t.Errorf("cancel reason = %q, want the session's deletion", reason)
	}
	cancel()
	receive(t, done)
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times, want 0", n)
	}
}

// A running call whose client went away: when the session expires, the
// call is canceled in the fleet and the tool's context ends, with the
// reason.
func TestIdleSessionCancelsRunningCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	block := windlass.MustFunc("block", func(ctx context.Context, in struct{}) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", ctx.Err()
	}, windlass.WithTimeout(10*time.Minute))
	f.startWorker(worker.Config{}, block)
	d := f.Dispatcher(dispatcher.Config{})
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	url := serve(t, mcpserver.Config{Dispatcher: d, SessionTimeout: 2 * time.Second, Logger: slog.New(logs)})
	dc := newDyingClient(t)
	cs := connectTransport(t, nil, dc.transport(url))

	ctx, giveUp := context.WithCancel(t.Context())
	defer giveUp()
	const id = "toolu_block_1"
	done := callInBackground(ctx, cs, "block", nil, mcp.Meta{mcpserver.MetaCallID: id})
	select {
	case <-started:
	case o := <-done:
		t.Fatalf("the call returned before the tool started: %+v %v", o.res, o.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never started")
	}
	dc.kill()
	giveUp()
	receive(t, done)

	select {
	case cause := <-causes:
		if !errors.Is(cause, windlass.ErrCallCanceled) || !strings.Contains(cause.Error(), "the MCP session ended: expired after 2s idle") {
			t.Errorf("the tool's context ended with %v, want the fleet's cancellation for the session's expiry", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the running tool was not canceled within 30s")
	}
	// The tool's context ends as the cancellation reaches the worker; the
	// call's answer is stored a moment apart from that.
	var st dispatcher.CallStatus
	var err error
	fleettest.WaitFor(t, 10*time.Second, "the canceled call finished", func() bool {
		st, err = d.Status(t.Context(), id)
		return err != nil || st.State == dispatcher.StateFinished
	})
	if err != nil || st.State != dispatcher.StateFinished || st.Result.Code() != windlass.CodeCanceled {
		t.Errorf("status = %+v, %v; want finished, canceled", st, err)
	}
}

// tools/call with the client's own call id in _meta: a retry (in the same
// session or another) is the same call, run once, with the same answer;
// an invalid id is refused.
func TestRetryWithTheSameCallID(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var runs atomic.Int64
	charge := windlass.MustFunc("charge", func(ctx context.Context, in payArgs) (string, error) {
		n := runs.Add(1)
		return fmt.Sprintf("charged %.2f to %s (run %d)", in.Amount, in.To, n), nil
	})
	f.startWorker(worker.Config{}, charge)
	url := serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})})
	cs := connect(t, url, nil)
	call := func(cs *mcp.ClientSession, meta mcp.Meta) *mcp.CallToolResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: payArgs{To: "bob", Amount: 5}, Meta: meta})
		if err != nil {
			t.Fatalf("CallTool: %v", err)
		}
		return res
	}

	const id = "toolu_01A09q90qw90lq917835lq9"
	want := "charged 5.00 to bob (run 1)"
	for i, cs := range []*mcp.ClientSession{cs, cs, connect(t, url, nil)} {
		res := call(cs, mcp.Meta{mcpserver.MetaCallID: id})
		if res.IsError || text(res) != want || res.Meta[mcpserver.MetaCallID] != id {
			t.Errorf("call %d = isError %v %q, _meta %v; want %q with call id %s", i+1, res.IsError, text(res), res.Meta, want, id)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times for three requests with one call id, want 1", n)
	}

	tests := []struct {
		name string
		id   any
		want string
	}{
		{name: "space", id: "toolu 01", want: "printable ASCII without spaces"},
		{name: "too long", id: strings.Repeat("x", windlass.MaxCallIDLength+1), want: "must be 1 to 128 characters"},
		{name: "empty", id: "", want: "must be 1 to 128 characters"},
		{name: "not a string", id: 42, want: "must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(cs, mcp.Meta{mcpserver.MetaCallID: tt.id})
			code, _ := res.Meta[mcpserver.MetaErrorCode].(string)
			if !res.IsError || code != string(windlass.CodeInvalidCall) || !strings.Contains(text(res), `_meta["dev.windlass/call_id"]`) || !strings.Contains(text(res), tt.want) {
				t.Errorf("result = isError %v, code %q, %q; want invalid_call naming the _meta key and %q", res.IsError, code, text(res), tt.want)
			}
		})
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1: an invalid id runs nothing", n)
	}
}

// An agent whose process died with a call held retries the model's tool
// call from a new session with the same call id: it waits for the same
// call, which the first session's expiry does not cancel, and the tool
// runs once.
func TestRetryFromANewSessionKeepsTheHeldCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	url := serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{}), SessionTimeout: 2 * time.Second, Logger: slog.New(logs)})

	const id = "toolu_pay_1"
	args := payArgs{To: "bob", Amount: 5}
	dc := newDyingClient(t)
	first := connectTransport(t, nil, dc.transport(url))
	ctx, giveUp := context.WithCancel(t.Context())
	defer giveUp()
	done := callInBackground(ctx, first, "pay", args, mcp.Meta{mcpserver.MetaCallID: id})
	apr.waitHeld(id, "pending")
	dc.kill()
	giveUp()
	receive(t, done)

	progress := make(chan *mcp.ProgressNotificationParams, 64)
	retry := connect(t, url, progressTo(progress))
	done = callInBackground(t.Context(), retry, "pay", args, mcp.Meta{mcpserver.MetaCallID: id, "progressToken": "r"})
	if got := firstCallID(t, progress); got != id {
		t.Fatalf("the retry's call id = %s, want %s", got, id)
	}
	fleettest.WaitFor(t, 30*time.Second, "the first session expired and closed", func() bool {
		return logs.has("mcpserver: session closed", "session_id="+first.ID(), "expired after 2s idle")
	})
	if status, reason := apr.held(id); status != "pending" {
		t.Fatalf("after the first session expired the call is %s (%s), want pending: the retry waits for it", status, reason)
	}
	if _, body := apr.do("GET", "/v1/approvals?status=pending&tool=pay", nil); len(body["items"].([]any)) != 1 {
		t.Fatalf("the approval service holds %d calls of pay, want 1", len(body["items"].([]any)))
	}
	apr.approveOne("pay")
	o := receive(t, done)
	if o.err != nil || o.res.IsError || text(o.res) != "paid 5.00 to bob" || o.res.Meta[mcpserver.MetaCallID] != id {
		t.Fatalf("retry = %+v (%q), %v", o.res, text(o.res), o.err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}

// While a call is held, a client with a progress token gets a progress
// notification at least every KeepAlive, naming the call and what it waits
// for, with strictly increasing progress; the open request keeps the
// session from expiring, even past its idle timeout.
func TestKeepAliveWhileHeld(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	const idle = 2 * time.Second
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	url := serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{}), KeepAlive: 100 * time.Millisecond, SessionTimeout: idle, Logger: slog.New(logs)})
	progress := make(chan *mcp.ProgressNotificationParams, 256)
	// No notification stream: only the call's own request keeps the
	// session alive.
	cs := connectTransport(t, progressTo(progress), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true})

	done := callInBackground(t.Context(), cs, "pay", payArgs{To: "bob", Amount: 5}, mcp.Meta{"progressToken": "k"})
	id := firstCallID(t, progress)
	last := -1.0
	var first time.Time
	n := 0
	for n < 3 || time.Since(first) < idle+idle/2 {
		p := nextProgress(t, progress)
		if first.IsZero() {
			first = time.Now()
		}
		n++
		if p.Meta[mcpserver.MetaCallID] != id || !strings.Contains(p.Message, "waiting for a person's approval") || !strings.Contains(p.Message, id) {
			t.Fatalf("keepalive %d = %+v, want the call id and what it waits for", n, p)
		}
		if p.Progress <= last {
			t.Fatalf("keepalive %d: progress %v after %v, want it to increase", n, p.Progress, last)
		}
		last = p.Progress
	}
	if status, reason := apr.held(id); status != "pending" {
		t.Fatalf("after %s of keepalives the call is %s (%s), want pending", time.Since(first).Round(time.Millisecond), status, reason)
	}
	apr.approveOne("pay")
	o := receive(t, done)
	if o.err != nil || o.res.IsError || text(o.res) != "paid 5.00 to bob" || runs.Load() != 1 {
		t.Fatalf("result = %+v (%q), %v; runs %d", o.res, text(o.res), o.err, runs.Load())
	}
}
