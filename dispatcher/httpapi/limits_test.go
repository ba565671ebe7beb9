package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/worker"
)

// TestAPIKeyIsTheCallersKey: a call over HTTP is counted for the API key
// that made it: one key over its rate is answered 429 rate_limited with a
// Retry-After, while another key's call goes on; a call's key is in its
// status.
func TestAPIKeyIsTheCallersKey(t *testing.T) {
	t.Parallel()
	f := &fleet{Fleet: fleettest.New(t), t: t, runs: new(atomic.Int64)}
	f.StartWorker(worker.Config{}, f.tools()...)
	f.d = f.Dispatcher(dispatcher.Config{Limits: limits.Config{Keys: map[string]limits.Limit{"flood": {Rate: limits.PerMinute(1).WithBurst(2)}}}})
	flood, calm := httpapi.NewAPIKey(), httpapi.NewAPIKey()
	var err error
	f.h, err = httpapi.New(httpapi.Config{Dispatcher: f.d, Conn: f.Conn(), APIKeys: []httpapi.APIKey{
		{Name: "flood", SHA256: httpapi.HashAPIKey(flood)}, {Name: "calm", SHA256: httpapi.HashAPIKey(calm)}}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	fleettest.WaitCatalog(t, f.d, "add", "slow", "fail", "count")

	start := time.Now()
	f.key = flood
	for i := range 2 {
		if c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":1},"id":"flood-`+strconv.Itoa(i)+`"}`), http.StatusOK); c.Result.Content != "2" {
			t.Fatalf("flood's call %d: %+v", i, c)
		}
	}
	r := f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":1}}`)
	after, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if time.Since(start) < time.Minute && (r.status != http.StatusTooManyRequests || r.errorCode() != windlass.CodeRateLimited || after < 1) {
		t.Fatalf("flood's third call within a minute = %s, Retry-After %q; want 429 rate_limited with a Retry-After", r, r.header.Get("Retry-After"))
	}
	f.key = calm
	if c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":2,"b":2}}`), http.StatusOK); c.Result.Content != "4" {
		t.Errorf("calm's call while flood is limited: %+v", c)
	}
	if c := f.call(f.do("GET", "/v1/calls/flood-0", ""), http.StatusOK); c.Key != "flood" {
		t.Errorf("GET of flood's call: key %q, want flood", c.Key)
	}
}

// TestAPIKeyNamesMustBeKeys: an API key whose name cannot be a caller's
// key is refused when the handler is made, naming the rule.
func TestAPIKeyNamesMustBeKeys(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	d := f.Dispatcher(dispatcher.Config{})
	_, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: f.Conn(), APIKeys: []httpapi.APIKey{{Name: "two words", SHA256: httpapi.HashAPIKey("k")}}})
	if err == nil {
		t.Fatal("an API key named \"two words\" was accepted")
	}
	t.Log(err)
}
