package mcpserver_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

func TestProgressNotifications(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	proceed := make(chan struct{})
	slow := windlass.MustFunc("slow", func(ctx context.Context, in struct{}) (string, error) {
		windlass.ReportProgress(ctx, 0.5, "halfway")
		select {
		case <-proceed:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done", nil
	})
	f.startWorker(worker.Config{}, slow)
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})}), progressTo(progress))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := callInBackground(ctx, cs, "slow", nil, mcp.Meta{"progressToken": "tok-1"})
	id := firstCallID(t, progress)
	last := 0.0
	for {
		p := nextProgress(t, progress)
		if p.ProgressToken != "tok-1" || p.Meta[mcpserver.MetaCallID] != id || p.Progress <= last || p.Total != 1 {
			t.Fatalf("progress = %+v after %v, want token tok-1, call id %s, increasing progress of 1", p, last, id)
		}
		last = p.Progress
		if p.Message == "halfway" {
			if p.Progress != 0.5 {
				t.Errorf("the tool's report = %+v, want 0.5 of 1", p)
			}
			break
		}
	}
	close(proceed)
	o := receive(t, done)
	if o.err != nil || o.res.IsError || text(o.res) != "done" {
		t.Fatalf("result = %+v, %v", o.res, o.err)
	}
}

func TestCancellationPassesThrough(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	started := make(chan string, 1)
	causes := make(chan error, 1)
	block := windlass.MustFunc("block", func(ctx context.Context, in struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		started <- info.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", ctx.Err()
	})
	// Every link of the cancellation logs to logs, dumped if the test
	// fails: the client's HTTP requests (is notifications/cancelled sent,
	// and answered?), the handler (did it cancel the call in the fleet, and
	// what did the fleet say?) and the worker (does its follower of the
	// cancels stream fail?).
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	w := f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond, Logger: slog.New(logs).With("side", "worker")}, block)
	d := f.Dispatcher(dispatcher.Config{})
	url := serve(t, mcpserver.Config{Dispatcher: d, Logger: slog.New(logs).With("side", "server")})
	cs := connectTransport(t, nil, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &loggingTransport{base: http.DefaultTransport, log: slog.New(logs).With("side", "client")}}})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "block"})
		errs <- err
	}()
	var id string
	select {
	case id = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never started")
	}
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool after cancel = %v, want context.Canceled", err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, windlass.ErrCallCanceled) {
			t.Errorf("the tool's context ended with %v, want windlass.ErrCallCanceled (canceled in the fleet)", cause)
		}
	case <-time.After(30 * time.Second):
		st, err := d.Status(t.Context(), id)
		t.Logf("call %s: status %+v, %v; worker stats %+v", id, st, err, w.Stats())
		t.Fatal("the running tool was not canceled within 30s")
	}
	// The session is still usable.
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Errorf("ListTools after a cancellation: %v", err)
	}
}

// loggingTransport logs each HTTP request of an MCP client: its JSON-RPC
// method, its answer or error, and the end of its response body.
type loggingTransport struct {
	base http.RoundTripper
	log  *slog.Logger
}

func (l *loggingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	what := r.Method
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
			Params struct {
				RequestID any `json:"requestId"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &msg)
		what = fmt.Sprintf("%s %s id=%v", r.Method, cmp.Or(msg.Method, "response"), cmp.Or(msg.ID, msg.Params.RequestID))
	}
	l.log.Debug("http: request", "what", what)
	begun := time.Now()
	resp, err := l.base.RoundTrip(r)
	if err != nil {
		l.log.Debug("http: request failed", "what", what, "after", time.Since(begun), "error", err)
		return nil, err
	}
	l.log.Debug("http: response", "what", what, "after", time.Since(begun), "status", resp.StatusCode, "type", resp.Header.Get("Content-Type"))
	resp.Body = &loggingBody{ReadCloser: resp.Body, log: l.log, what: what, begun: begun}
	return resp, nil
}

type loggingBody struct {
	io.ReadCloser
	log   *slog.Logger
	what  string
	begun time.Time
	once  sync.Once
}

func (b *loggingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(func() {
			b.log.Debug("http: response body ended", "what", b.what, "after", time.Since(b.begun), "error", err)
		})
	}
	return n, err
}

func TestToolListChanged(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker(worker.Config{}, basicTools()...)
	var mu sync.Mutex
	notified := 0
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})}), &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			mu.Lock()
			notified++
			mu.Unlock()
		},
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return notified }
	if tools := listTools(t, cs); tools["late"] != nil {
		t.Fatal("late listed before its worker started")
	}

	late := windlass.MustFunc("late", func(ctx context.Context, in struct{}) (string, error) { return "here", nil })
	stop := f.startWorker(worker.Config{}, late)
	fleettest.WaitFor(t, 30*time.Second, "a list-changed notification after a worker with a new tool started", func() bool { return count() >= 1 })
	if tools := listTools(t, cs); tools["late"] == nil || len(tools) != 4 {
		t.Fatalf("tools after the notification = %v, want late among 4", tools)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "late"})
	if err != nil || text(res) != "here" {
		t.Fatalf("call late = %v, %v", res, err)
	}

	before := count()
	stop() // withdraws: the tool has no live worker
	fleettest.WaitFor(t, 30*time.Second, "a list-changed notification after the tool's only worker stopped", func() bool { return count() > before })
	if tools := listTools(t, cs); tools["late"] != nil || len(tools) != 3 {
		t.Fatalf("tools after the worker stopped = %v, want the 3 others", tools)
	}
}
