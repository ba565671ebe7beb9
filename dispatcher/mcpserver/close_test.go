package mcpserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// blockTool is a tool that runs until release is closed (then succeeds
// with "done <call id>") or its context ends (the cause is recorded under
// its call id).
type blockTool struct {
	started chan string
	release chan struct{}
	mu      sync.Mutex
	causes  map[string]error
	runs    map[string]int
}

func newBlockTool() *blockTool {
	return &blockTool{started: make(chan string, 64), release: make(chan struct{}), causes: map[string]error{}, runs: map[string]int{}}
}

func (b *blockTool) tool(name string) windlass.Tool {
	return windlass.MustFunc(name, func(ctx context.Context, in struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		b.mu.Lock()
		b.runs[info.ID]++
		b.mu.Unlock()
		b.started <- info.ID
		select {
		case <-b.release:
			return "done " + info.ID, nil
		case <-ctx.Done():
			b.mu.Lock()
			b.causes[info.ID] = context.Cause(ctx)
			b.mu.Unlock()
			return "", ctx.Err()
		}
	}, windlass.WithTimeout(10*time.Minute))
}

// cause is what ended the context of call id's run, if anything did.
func (b *blockTool) cause(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.causes[id]
}

// runCount is how many times call id ran.
func (b *blockTool) runCount(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[id]
}

// waitStarted waits until n runs started.
func (b *blockTool) waitStarted(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-b.started:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d calls started", i, n)
		}
	}
}

// waitFinished waits until call id is finished in the fleet and returns
// its status.
func waitFinished(t *testing.T, d *dispatcher.Dispatcher, id string) dispatcher.CallStatus {
	t.Helper()
	var st dispatcher.CallStatus
	var err error
	fleettest.WaitFor(t, 30*time.Second, "call "+id+" finished", func() bool {
		st, err = d.Status(t.Context(), id)
		return err == nil && st.State == dispatcher.StateFinished
	})
	return st
}

// serveHandler is serve, returning the handler for a test to close.
func serveHandler(t *testing.T, cfg mcpserver.Config) (*mcpserver.Handler, string) {
	t.Helper()
	h, err := mcpserver.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	return h, srv.URL
}

// Handler.Close loses no call, however many a session waits for. The
// SDK's session Close, once begun, fails the responses still to be
// written, and that cancels every other request of the session in
// progress (cause jsonrpc2's ErrServerClosing): the handler took that for
// the client's cancellation and canceled those calls in the fleet
// ("canceled by the MCP client"). (Found by a review helper.)
func TestCloseLetsTheCallsOfASessionGoOn(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	f.startWorker(worker.Config{}, b.tool("block"))
	d := f.Dispatcher(dispatcher.Config{})
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	h, url := serveHandler(t, mcpserver.Config{Dispatcher: d, Logger: slog.New(logs)})
	cs := connect(t, url, nil)

	const n = 4
	var dones []<-chan callOutcome
	for i := range n {
		dones = append(dones, callInBackground(t.Context(), cs, "block", nil, mcp.Meta{mcpserver.MetaCallID: fmt.Sprintf("close_%d", i)}))
	}
	b.waitStarted(t, n)

	_ = h.Close()
	for _, done := range dones {
		receive(t, done)
	}
	// The calls go on in the fleet: let them finish.
	close(b.release)
	for i := range n {
		id := fmt.Sprintf("close_%d", i)
		if st := waitFinished(t, d, id); st.Result.IsError {
			t.Errorf("call %s after Handler.Close: %s %q (tool's context: %v); want it to go on and succeed", id, st.Result.Code(), st.Result.Content, b.cause(id))
		}
		if runs := b.runCount(id); runs != 1 {
			t.Errorf("call %s ran %d times, want 1", id, runs)
		}
	}
}

// The same for calls held for approval: Handler.Close (a replica's
// restart) leaves every held call of a session pending at the approval
// service; before, all but one were canceled there, "canceled by the MCP
// client". (Found by a review helper.)
func TestCloseLeavesHeldCallsPending(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	d := f.Dispatcher(dispatcher.Config{})
	h, url := serveHandler(t, mcpserver.Config{Dispatcher: d})
	cs := connect(t, url, nil)

	const n = 3
	var dones []<-chan callOutcome
	for i := range n {
		dones = append(dones, callInBackground(t.Context(), cs, "pay", payArgs{To: "bob", Amount: float64(i + 1)}, mcp.Meta{mcpserver.MetaCallID: fmt.Sprintf("held_%d", i)}))
	}
	for i := range n {
		apr.waitHeld(fmt.Sprintf("held_%d", i), "pending")
	}
	_ = h.Close()
	for _, done := range dones {
		receive(t, done)
	}
	// Close returned once every handler did, and a handler that cancels a
	// call has the fleet answer it canceled before it returns.
	for i := range n {
		id := fmt.Sprintf("held_%d", i)
		if st, err := d.Status(t.Context(), id); err != nil || st.State == dispatcher.StateFinished {
			t.Errorf("held call %s after Handler.Close: %+v, %v; want it still held: Close loses no call", id, st, err)
		}
		if st, reason := apr.held(id); st != "pending" {
			t.Errorf("held call %s after Handler.Close: %s (%s) at the approval service, want pending", id, st, reason)
		}
	}
	if got := runs.Load(); got != 0 {
		t.Errorf("the gated tool ran %d times, want 0", got)
	}
}

// Handler.Close answers every request waiting for a call before it closes
// the sessions: an error result, unavailable, that says the server is
// shutting down and names the call id (a client that did not choose the
// id learns it there), while the call goes on in the fleet. Before, the
// SDK's session close refused the answers, and the requests' streams
// ended without one. The client here speaks HTTP by hand, to read each
// POST's stream to its end. (Found by a review helper.)
func TestCloseAnswersTheWaitingRequests(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	f.startWorker(worker.Config{}, b.tool("block"))
	d := f.Dispatcher(dispatcher.Config{})
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	h, url := serveHandler(t, mcpserver.Config{Dispatcher: d, Logger: slog.New(logs)})

	c := &rawClient{url: url}
	c.open(t)
	const n = 2
	bodies := make(chan string, n)
	for i := range n {
		go func() {
			_, body, err := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"block","arguments":{}}}`, i+1))
			bodies <- fmt.Sprintf("%s %v", body, err)
		}()
	}
	var ids []string
	for range n {
		select {
		case id := <-b.started:
			ids = append(ids, id)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d calls started", len(ids), n)
		}
	}

	_ = h.Close()
	var all string
	for range n {
		select {
		case body := <-bodies:
			all += body + "\n"
		case <-time.After(30 * time.Second):
			t.Fatal("a tools/call POST did not end within 30s of Close")
		}
	}
	for i := range n {
		if !strings.Contains(all, fmt.Sprintf(`"id":%d,"result"`, i+1)) {
			t.Errorf("no result for request %d after Handler.Close; the POSTs' streams: %s", i+1, all)
		}
	}
	for _, id := range ids {
		if !strings.Contains(all, "shutting down; the call goes on in the fleet (call id "+id+")") {
			t.Errorf("no answer names call %s as going on after Handler.Close; the POSTs' streams: %s", id, all)
		}
	}
	close(b.release)
	for _, id := range ids {
		if st := waitFinished(t, d, id); st.Result.IsError {
			t.Errorf("call %s after Handler.Close: %s %q; want it to go on and succeed", id, st.Result.Code(), st.Result.Content)
		}
	}
}

// rawClient speaks MCP's streamable HTTP by hand, protocol 2025-06-18,
// one session, no notification stream.
type rawClient struct {
	url string
	mu  sync.Mutex
	sid string
}

// initialize is the raw client's initialize request.
const initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// open opens the client's session: initialize, then initialized.
func (c *rawClient) open(t *testing.T) {
	t.Helper()
	if code, body, err := c.post(initialize); err != nil || code != http.StatusOK {
		t.Fatalf("initialize: %d %s %v", code, body, err)
	}
	if code, body, err := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s %v", code, body, err)
	}
}

// post sends one JSON-RPC message and reads the whole answer.
func (c *rawClient) post(body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	c.mu.Lock()
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	c.mu.Unlock()
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.mu.Lock()
		c.sid = s
		c.mu.Unlock()
	}
	return resp.StatusCode, string(bytes.TrimSpace(b)), err
}

// A closed handler takes no new request: an initialize, a tools/call of
// a session opened before, a DELETE are answered 503 with Retry-After
// (another replica will take them), and nothing is submitted. Before, an
// initialize after Close opened a session nothing would ever close, and
// a tools/call reached the fleet through a handler whose waits had ended.
func TestAClosedHandlerTakesNoNewRequest(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	f.startWorker(worker.Config{}, b.tool("block"))
	d := f.Dispatcher(dispatcher.Config{})
	h, url := serveHandler(t, mcpserver.Config{Dispatcher: d})
	c := &rawClient{url: url}
	c.open(t)
	_ = h.Close()

	const id = "after_close_1"
	code, body, err := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{},"_meta":{"` + mcpserver.MetaCallID + `":"` + id + `"}}}`)
	if err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("tools/call after Close: %d %s %v; want 503", code, body, err)
	}
	fresh := &rawClient{url: url}
	code, body, err = fresh.post(initialize)
	if err != nil || code != http.StatusServiceUnavailable || fresh.sid != "" {
		t.Errorf("initialize after Close: %d %s %v, session %q; want 503 and no session", code, body, err, fresh.sid)
	}
	if st, err := d.Status(t.Context(), id); err != nil || st.State != dispatcher.StateUnknown {
		t.Errorf("Status of the call sent after Close = %s, %v; want unknown: nothing submitted", st.State, err)
	}
}
