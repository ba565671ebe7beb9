package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// TestLargePayloads: a call whose arguments and result are 10 MiB and
// 50 MiB — over the NATS server's max payload, so they travel by
// reference in the fleet — is answered in full by the synchronous POST,
// and by a GET of the call afterwards, as if inline; a body over the
// dispatcher's limit is answered 413 payload_too_large.
func TestLargePayloads(t *testing.T) {
	t.Parallel()
	fl := fleettest.New(t)
	mirror := windlass.MustFunc("mirror", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	}, windlass.WithTimeout(3*time.Minute)) // 50 MiB under -race on a loaded machine: past the default 30 s
	fl.StartWorker(worker.Config{}, mirror)
	d := fl.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "mirror")
	// 50 MiB each way, through JSON, SHA-256 and the object store four
	// times under -race on a loaded machine, can take past the default
	// wait (60 s): this test is about the payload, not its speed, so the
	// POST waits, and the client with it, as long as the tool may run.
	const patience = 4 * time.Minute
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, MaxWait: patience})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fleet{Fleet: fl, t: t, d: d, h: h, srv: srv, timeout: patience + time.Minute}

	for _, size := range []int{10 << 20, 50 << 20} {
		want := strings.Repeat("0123456789abcdef", size/16)
		body, _ := json.Marshal(map[string]any{"tool": "mirror", "arguments": map[string]string{"text": want}, "timeout_ms": patience.Milliseconds()})
		c := f.call(f.do("POST", "/v1/calls", string(body)), http.StatusOK)
		if c.Result == nil || c.Result.IsError || c.Result.Content != want || c.Result.ContentRef != nil {
			t.Fatalf("%d bytes: POST answered %.200v", size, c.Result)
		}
		var got string
		if err := c.Result.Decode(&got); err != nil || got != want {
			t.Errorf("%d bytes: the POST's data = %d bytes, %v", size, len(got), err)
		}
		again := f.call(f.do("GET", "/v1/calls/"+c.ID, ""), http.StatusOK)
		if again.Result == nil || again.Result.Content != want {
			t.Errorf("%d bytes: GET answered %.200v", size, again.Result)
		}
	}

	small := httptest.NewServer(must(httpapi.New(httpapi.Config{Dispatcher: fl.Dispatcher(dispatcher.Config{PayloadLimit: 1 << 20})})))
	t.Cleanup(small.Close)
	f.srv = small
	body, _ := json.Marshal(map[string]any{"tool": "mirror", "arguments": map[string]string{"text": strings.Repeat("x", 2<<20)}})
	if r := f.do("POST", "/v1/calls", string(body)); r.status != http.StatusRequestEntityTooLarge || r.errorCode() != windlass.CodePayloadTooLarge {
		t.Errorf("a body over the limit: %.300s; want 413 payload_too_large", r)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
