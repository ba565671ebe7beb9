package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestAnEventStreamOutlastsMaxWait: a call that runs longer than the
// dispatcher's MaxWait (15 minutes by default, here 1s): its event stream
// follows it to its end, the call's own outcome its last event. Before,
// the stream ended at MaxWait with an "error" event saying timeout, while
// the call ran on and succeeded. (Found by a review helper.)
func TestAnEventStreamOutlastsMaxWait(t *testing.T) {
	t.Parallel()
	f := &fleet{Fleet: fleettest.New(t), t: t, runs: new(atomic.Int64)}
	f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, f.tools()...)
	nc := f.Conn()
	f.d = f.Dispatcher(dispatcher.Config{Conn: nc, MaxWait: time.Second})
	var err error
	f.h, err = httpapi.New(httpapi.Config{Dispatcher: f.d, Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	fleettest.WaitCatalog(t, f.d, "add", "slow", "fail", "count")

	c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":3000},"async":true}`), http.StatusAccepted)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/calls/"+c.ID+"/events", nil)
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	stream := strings.TrimSpace(string(raw))
	lastEvent := stream[strings.LastIndex(stream, "event: "):]
	t.Logf("the stream's last event:\n%s", lastEvent)

	final := f.pollUntil(c.ID, "finished", func(c httpapi.Call) bool { return c.State == dispatcher.StateFinished })
	t.Logf("then the call finished: error %v, content %q", final.Result.IsError, final.Result.Content)
	if !strings.HasPrefix(lastEvent, "event: finished") && !final.Result.IsError {
		t.Errorf("the event stream's last word was not the call's outcome (%.120s) while the call was still running; it then succeeded with %q", lastEvent, final.Result.Content)
	}
}
