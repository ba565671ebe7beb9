package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// TestA202DoesNotClaimAStateItDidNotRead: POST async answers 202 with the
// call's status. When that status cannot be read (the calls stream's
// reads time out, as in a leader election), the body must not say
// "queued" — the call may be running, or finished, by then — but
// "unknown", which the OpenAPI document defines as not read, Location
// being the way to ask.
func TestA202DoesNotClaimAStateItDidNotRead(t *testing.T) {
	ff := fleettest.New(t)
	ff.StartWorker(worker.Config{}, windlass.MustFunc("quick", func(ctx context.Context, _ struct{}) (string, error) {
		return "done", nil
	}))
	blocker := &fleettest.ReadBlocker{Stream: layout.CallsStream}
	nc := ff.NATS.Connect(t, nats.SetCustomDialer(blocker))
	d := ff.Dispatcher(dispatcher.Config{Conn: nc})
	fleettest.WaitCatalog(t, d, "quick")
	h, err := httpapi.New(httpapi.Config{Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fleet{Fleet: ff, t: t, d: d, h: h, srv: srv}

	blocker.Block(true)
	r := f.do("POST", "/v1/calls", `{"tool":"quick","async":true}`)
	blocker.Block(false)
	if blocker.Lost() == 0 {
		t.Fatal("no read of the calls stream was lost; the test needs the status read to fail")
	}
	c := f.call(r, http.StatusAccepted)
	if c.State != dispatcher.StateUnknown || c.URL == "" || r.header.Get("Location") != c.URL {
		t.Errorf("202 = %s, Location %q; want state %q (the status could not be read) and the call's URL", r, r.header.Get("Location"), dispatcher.StateUnknown)
	}
	matchesSchema(t, r, "Call")
	f.pollUntil(c.ID, "the call's result", func(c httpapi.Call) bool { return c.State == dispatcher.StateFinished })
}
