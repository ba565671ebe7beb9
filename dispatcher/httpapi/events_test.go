package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// sse is one server-sent event.
type sse struct {
	name string
	data httpapi.Event
}

// readEvents reads a call's event stream to its end.
func (f *fleet) readEvents(t *testing.T, ctx context.Context, id string) []sse {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/calls/"+id+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
		case line == "" && cur.name != "":
			out = append(out, cur)
			cur = sse{}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read events: %v (so far %v)", err, out)
	}
	return out
}

// TestEvents follows a call's events as server-sent events: queued,
// started, progress, then finished with the result, after which the
// stream ends.
func TestEvents(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":400},"async":true}`), http.StatusAccepted)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	events := f.readEvents(t, ctx, c.ID)

	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.name)
		if string(e.data.Kind) != e.name || e.data.CallID != c.ID {
			t.Errorf("event %q carries kind %q, call %q", e.name, e.data.Kind, e.data.CallID)
		}
	}
	got := strings.Join(kinds, ",")
	if !strings.HasPrefix(got, "queued,started,") || !strings.HasSuffix(got, ",finished") {
		t.Fatalf("events %s; want queued, started, …, finished", got)
	}
	last := events[len(events)-1].data
	if last.Result == nil || last.Result.Content != "slept 400ms" {
		t.Errorf("finished event's result = %+v", last.Result)
	}
	if events[1].data.Worker == "" || events[1].data.Attempt != 1 {
		t.Errorf("started event = %+v, want the worker and attempt 1", events[1].data)
	}

	// A finished call's stream replays its events and ends at once.
	again := f.readEvents(t, ctx, c.ID)
	if len(again) == 0 || again[0].name != "queued" || again[len(again)-1].name != "finished" {
		t.Errorf("replayed events %v", again)
	}
}

// TestEventsStopOnDisconnect closes the client side of a stream while the
// call runs: the handler returns (goleak in TestMain catches a leak) and
// the call goes on.
func TestEventsStopOnDisconnect(t *testing.T) {
	f := newFleet(t, httpapi.Config{KeepAlive: 20 * time.Millisecond})
	c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":60000},"async":true}`), http.StatusAccepted)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/calls/"+c.ID+"/events", nil)
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	sawQueued, sawKeepAlive := false, false
	for sc.Scan() && !(sawQueued && sawKeepAlive) {
		sawQueued = sawQueued || sc.Text() == "event: queued"
		sawKeepAlive = sawKeepAlive || strings.HasPrefix(sc.Text(), ":")
	}
	cancel()
	res.Body.Close()
	if !sawQueued || !sawKeepAlive {
		t.Fatalf("stream ended before a queued event and a keep-alive comment")
	}
	st := f.call(f.do("GET", "/v1/calls/"+c.ID, ""), http.StatusOK)
	if st.State == "finished" {
		t.Errorf("the call finished when its watcher left: %+v", st.Result)
	}
	// Cancel it so the worker stops before the test ends.
	if c := f.call(f.do("DELETE", "/v1/calls/"+c.ID, ""), http.StatusOK); c.Result.Code() != windlass.CodeCanceled {
		t.Errorf("cancel: %+v", c.Result)
	}
}
