package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestUnconfirmedSubmitGivesTheCallID: POST /v1/calls (async, no id of
// the caller's) whose call reached the stream and ran, but whose
// publish's acknowledgement was lost. The answer is a 503 unavailable
// that gives the call's URL (Location) and names its id: a client that
// retries asks about it, or POSTs that id, instead of running the tool
// again under a new one. Before, the id was in neither.
func TestUnconfirmedSubmitGivesTheCallID(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	var runs atomic.Int64
	ran := make(chan struct{}, 8)
	f.StartWorker(worker.Config{}, windlass.MustFunc("once", func(ctx context.Context, _ struct{}) (int64, error) {
		ran <- struct{}{}
		return runs.Add(1), nil
	}))
	dialer := &fleettest.DeafDialer{}
	conn := f.NATS.Connect(t, nats.SetCustomDialer(dialer))
	d := f.Dispatcher(dispatcher.Config{Conn: conn})
	fleettest.WaitCatalog(t, d, "once")
	h, err := httpapi.New(httpapi.Config{Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	dialer.Deafen()
	type answer struct {
		status int
		header http.Header
		body   string
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := srv.Client().Post(srv.URL+"/v1/calls", "application/json", strings.NewReader(`{"tool":"once","async":true}`))
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}()
	select {
	case <-ran: // stored and run: only the acknowledgement is lost
	case a := <-got:
		t.Fatalf("POST answered %d %s before the tool ran (%v)", a.status, a.body, a.err)
	}
	conn.Close()
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	loc := a.header.Get("Location")
	id := loc[strings.LastIndex(loc, "/")+1:]
	if a.status != http.StatusServiceUnavailable || !strings.HasPrefix(loc, "/v1/calls/") || id == "" || !strings.Contains(a.body, id) {
		t.Errorf("POST /v1/calls = %d, Location %q, body %s; want 503 naming the call's URL and id (the call ran %d times)", a.status, loc, a.body, runs.Load())
	}
}
