package mcpserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestARetryInItsSubmitIsNotCanceledByAnotherClient: request A (session 1)
// waits for call X; request B (session 2), a retry of the same call (same
// _meta call id, same arguments), is in its submit when A's client
// cancels. At fc643be B counted among X's waiters only once its submit
// was accepted, so A left "last" and canceled X, and B was answered
// canceled by another client's cancellation (found by a review helper).
// A's cancellation is now owed to B while B submits: accepted, B takes
// the call over and gets its result. (The same gate as
// TestARefusedRequestDoesNotAbsorbACancellation holds B in its submit.)
func TestARetryInItsSubmitIsNotCanceledByAnotherClient(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	f.startWorker(worker.Config{}, b.tool("work"))
	gate, d, logs, url := serveGated(t, f)

	const id = "toolu_retry_1"
	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	doneA := callInBackground(ctxA, connect(t, url, nil), "work", nil, mcp.Meta{mcpserver.MetaCallID: id})
	b.waitStarted(t, 1) // call X
	gate.armed.Store(true)
	doneB := callInBackground(t.Context(), connect(t, url, nil), "work", nil, mcp.Meta{mcpserver.MetaCallID: id})
	select {
	case <-gate.entered: // B joined, and is in its submit
	case <-time.After(30 * time.Second):
		t.Fatal("B's submit never started")
	}
	cancelA()
	receive(t, doneA)
	fleettest.WaitFor(t, 10*time.Second, "A's handler handled its cancellation", func() bool {
		return logs.has("mcpserver: call canceled", "call_id="+id) || logs.has("another request waits for the call", "call_id="+id)
	})
	close(gate.release)
	close(b.release) // X may finish now, if it still runs
	oB := receive(t, doneB)
	t.Logf("B: %v %q, %v", oB.res.Meta[mcpserver.MetaErrorCode], text(oB.res), oB.err)
	st, err := d.Status(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State == dispatcher.StateFinished && st.Result.Code() == windlass.CodeCanceled {
		t.Errorf("call X was canceled by A's client while B, a retry of X sent before that cancel, was submitting: B is answered %q", text(oB.res))
	}
}

// TestASessionDeletedDuringTheSubmitCancelsTheCall: the session is deleted
// while its only request is in its submit (before it is accepted, so
// before it counts among the call's waiters): once the submit is accepted
// the wait ends at once and the call is canceled, as call's comment says.
func TestASessionDeletedDuringTheSubmitCancelsTheCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	b := newBlockTool()
	defer close(b.release)
	f.startWorker(worker.Config{}, b.tool("work"))
	gate, d, logs, url := serveGated(t, f)

	const id = "toolu_deleted_in_submit"
	cs := connect(t, url, nil)
	gate.armed.Store(true)
	done := callInBackground(t.Context(), cs, "work", nil, mcp.Meta{mcpserver.MetaCallID: id})
	select {
	case <-gate.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the submit never started")
	}
	deleted := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodDelete, url, nil)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			deleted <- -1
			return
		}
		resp.Body.Close()
		deleted <- resp.StatusCode
	}()
	fleettest.WaitFor(t, 10*time.Second, "the session ended", func() bool { return logs.has("mcpserver: session ended") })
	close(gate.release)
	receive(t, done)
	t.Logf("DELETE: %d", <-deleted)
	fleettest.WaitFor(t, 20*time.Second, "call X canceled", func() bool {
		st, err := d.Status(t.Context(), id)
		return err == nil && st.State == dispatcher.StateFinished && st.Result.Code() == windlass.CodeCanceled
	})
}
