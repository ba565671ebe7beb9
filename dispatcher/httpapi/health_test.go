package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// TestReadyz: ready while NATS is connected and the registry view fresh;
// 503 naming the registry once Redis has been gone past MaxStaleness, and
// naming NATS once NATS is down.
func TestReadyz(t *testing.T) {
	f := newFleet(t, httpapi.Config{MaxStaleness: 500 * time.Millisecond})
	if r := f.do("GET", "/readyz", ""); r.status != http.StatusOK {
		t.Fatalf("readyz = %s", r)
	}
	f.Redis.Kill()
	fleettest.WaitFor(t, 30*time.Second, "readyz to fail with Redis down", func() bool {
		r := f.do("GET", "/readyz", "")
		return r.status == http.StatusServiceUnavailable && strings.HasPrefix(string(r.body), "registry:")
	})
	if r := f.do("GET", "/healthz", ""); r.status != http.StatusOK || string(r.body) != "ok\n" {
		t.Errorf("healthz = %s; the process still serves", r)
	}
	f.Redis.Restart(t)
	fleettest.WaitFor(t, 30*time.Second, "readyz to recover with Redis back", func() bool {
		return f.do("GET", "/readyz", "").status == http.StatusOK
	})
	f.NATS.Stop()
	fleettest.WaitFor(t, 30*time.Second, "readyz to fail with NATS down", func() bool {
		r := f.do("GET", "/readyz", "")
		return r.status == http.StatusServiceUnavailable && strings.HasPrefix(string(r.body), "nats:")
	})
}

// TestExtra mounts another handler beside the API, behind the same key
// check; a pattern that clashes with the API's routes is refused.
func TestExtra(t *testing.T) {
	key := httpapi.NewAPIKey()
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("mcp here")) })
	f := newFleet(t, httpapi.Config{APIKeys: []httpapi.APIKey{{SHA256: httpapi.HashAPIKey(key)}}, Extra: map[string]http.Handler{"/mcp": mcp}})
	if r := f.do("POST", "/mcp", `{}`); r.status != http.StatusUnauthorized {
		t.Errorf("/mcp without a key = %s", r)
	}
	f.key = key
	if r := f.do("POST", "/mcp", `{}`); r.status != http.StatusOK || string(r.body) != "mcp here" {
		t.Errorf("/mcp with a key = %s", r)
	}
	if r := f.do("GET", "/v1/tools", ""); r.status != http.StatusOK {
		t.Errorf("the API beside it = %s", r)
	}
	for _, pattern := range []string{"/v1/tools", "GET /v1/calls/{id}"} {
		if _, err := httpapi.New(httpapi.Config{Dispatcher: f.d, Extra: map[string]http.Handler{pattern: mcp}}); err == nil {
			t.Errorf("Extra %q: New accepted a pattern that clashes with the API", pattern)
		}
	}
	if _, err := httpapi.New(httpapi.Config{Dispatcher: f.d, Extra: map[string]http.Handler{"/": mcp}}); err != nil {
		t.Errorf("Extra \"/\" (serve what no route does): %v", err)
	}
	if _, err := httpapi.New(httpapi.Config{}); err == nil || !strings.Contains(err.Error(), "Config.Dispatcher") {
		t.Errorf("New without a dispatcher: %v", err)
	}
}

// TestDrain: a server shutting down makes a waiting call answer 202 with
// its URL at once, and the call goes on.
func TestDrain(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	type answer struct {
		status   int
		location string
		err      error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := f.srv.Client().Post(f.srv.URL+"/v1/calls", "application/json",
			strings.NewReader(`{"tool":"slow","arguments":{"ms":30000},"id":"drained-1"}`))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		res.Body.Close()
		answered <- answer{status: res.StatusCode, location: res.Header.Get("Location")}
	}()
	fleettest.WaitFor(t, 30*time.Second, "the slow call to start", func() bool {
		r := f.do("GET", "/v1/calls/drained-1", "")
		return r.status == http.StatusOK && strings.Contains(string(r.body), `"state":"running"`)
	})
	f.h.Drain()
	select {
	case a := <-answered:
		if a.err != nil || a.status != http.StatusAccepted || a.location != "/v1/calls/drained-1" {
			t.Fatalf("drained POST = %+v; want 202 with the call's URL", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting POST did not answer at Drain")
	}
	if c := f.call(f.do("GET", "/v1/calls/drained-1", ""), http.StatusOK); c.State == "finished" {
		t.Errorf("the call ended with the wait: %+v", c.Result)
	}
	f.call(f.do("DELETE", "/v1/calls/drained-1", ""), http.StatusOK) // stop the worker's call
}
