package mcpserver_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// Two requests, in two sessions, wait for one call (the same _meta call
// id: a client that lost its connection retried from a new session, its
// first request still open). The first client cancels its request
// (notifications/cancelled, what the go-sdk and TypeScript clients send
// when their request times out): the call goes on for the second request,
// which gets its result. Before, the first request's cancellation canceled
// the call in the fleet under the second. (Found by a review helper.)
func TestCancelByOneWaiterLeavesTheCallToAnother(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	f.startWorker(worker.Config{}, b.tool("block"))
	_, logs, url := serveLogged(t, f, dispatcher.Config{})

	const id = "toolu_shared_1"
	first := connect(t, url, nil)
	ctx, cancelFirst := context.WithCancel(t.Context())
	defer cancelFirst()
	doneFirst := callInBackground(ctx, first, "block", nil, mcp.Meta{mcpserver.MetaCallID: id})
	b.waitStarted(t, 1)

	progress := make(chan *mcp.ProgressNotificationParams, 64)
	second := connect(t, url, progressTo(progress))
	doneSecond := callInBackground(t.Context(), second, "block", nil, mcp.Meta{mcpserver.MetaCallID: id, "progressToken": "s"})
	if got := firstCallID(t, progress); got != id { // the second request waits for the call
		t.Fatalf("second request's call id = %s, want %s", got, id)
	}

	cancelFirst()
	if o := receive(t, doneFirst); o.err == nil {
		t.Fatalf("first request after its cancellation = %+v, want an error", o.res)
	}
	fleettest.WaitFor(t, 10*time.Second, "the handler handled the first request's cancellation", func() bool {
		return logs.has("mcpserver: call canceled", "call_id="+id) || logs.has("another request waits for the call", "call_id="+id)
	})
	close(b.release)
	o := receive(t, doneSecond)
	if o.err != nil || o.res.IsError || text(o.res) != "done "+id {
		t.Errorf("second request = %+v (%q), %v; tool's context: %v; want %q: it did not cancel, and waits for the call",
			o.res, resultText(o.res), o.err, b.cause(id), "done "+id)
	}
	if runs := b.runCount(id); runs != 1 {
		t.Errorf("the tool ran %d times, want 1", runs)
	}
}

// Two requests wait for one call that gets no result (it is queued behind
// a busy worker past its deadline). The first request's bound passes
// first: the call goes on for the second, whose own bound passing cancels
// it; one request is told the call goes on for the other, the other that
// it timed out, and neither that it was canceled. Before, the first
// request's bound canceled the call under the second, which was told
// "canceled by its caller".
func TestBoundOfOneWaiterLeavesTheCallToAnother(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	defer close(b.release)
	quick := windlass.MustFunc("quick", func(ctx context.Context, in struct{}) (string, error) {
		return "quick", nil
	}, windlass.WithTimeout(time.Second))
	f.startWorker(worker.Config{MaxConcurrency: 1}, b.tool("hog"), quick)
	d := f.Dispatcher(dispatcher.Config{})
	logs := newLogRecorder()
	defer logs.dumpIfFailed(t)
	url := serve(t, mcpserver.Config{Dispatcher: d, QueueAllowance: time.Second, Logger: slog.New(logs)})

	// The worker's one slot is taken: quick stays queued.
	if _, err := d.Submit(t.Context(), "hog", struct{}{}, dispatcher.WithCallID("hog_1")); err != nil {
		t.Fatal(err)
	}
	b.waitStarted(t, 1)

	const id = "toolu_quick_1"
	p1 := make(chan *mcp.ProgressNotificationParams, 64)
	done1 := callInBackground(t.Context(), connect(t, url, progressTo(p1)), "quick", nil, mcp.Meta{mcpserver.MetaCallID: id, "progressToken": "1"})
	firstCallID(t, p1)
	p2 := make(chan *mcp.ProgressNotificationParams, 64)
	done2 := callInBackground(t.Context(), connect(t, url, progressTo(p2)), "quick", nil, mcp.Meta{mcpserver.MetaCallID: id, "progressToken": "2"})
	firstCallID(t, p2)

	codes := map[string]int{}
	for i, done := range []<-chan callOutcome{done1, done2} {
		o := receive(t, done)
		if o.err != nil {
			t.Fatalf("request %d: %v", i+1, o.err)
		}
		code, _ := o.res.Meta[mcpserver.MetaErrorCode].(string)
		t.Logf("request %d: %s %q", i+1, code, text(o.res))
		switch {
		case code == string(windlass.CodeUnavailable) && strings.Contains(text(o.res), "goes on for another request"):
			codes["goes on"]++
		default:
			codes[code]++
		}
	}
	if codes["goes on"] != 1 || codes[string(windlass.CodeTimeout)] != 1 {
		t.Errorf("answers %v; want one told the call goes on for the other request, one told it timed out", codes)
	}
}

// resultText is r's text, or "" for no result.
func resultText(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	return text(r)
}
