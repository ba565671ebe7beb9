package httpapi_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type addArgs struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type slowArgs struct {
	MS int `json:"ms"`
}

type failArgs struct {
	Why string `json:"why"`
}

// fleet is one test's fleet (see fleettest): a worker serving add, slow,
// fail and count, a dispatcher, and the API on an httptest server.
type fleet struct {
	*fleettest.Fleet
	t    *testing.T
	d    *dispatcher.Dispatcher
	h    *httpapi.Handler
	srv  *httptest.Server
	key  string        // sent as the bearer token, when set
	runs *atomic.Int64 // executions of count
	// timeout bounds each request; zero: 90 s.
	timeout time.Duration
}

// newFleet starts a fleet; cfg's Dispatcher (and Conn, unless set) are
// filled in.
func newFleet(t *testing.T, cfg httpapi.Config) *fleet {
	t.Helper()
	f := &fleet{Fleet: fleettest.New(t), t: t, runs: new(atomic.Int64)}
	tools := f.tools()
	names := make([]string, len(tools))
	for i, tool := range tools {
		names[i] = tool.Spec().Name
	}
	f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, tools...)
	nc := f.Conn()
	f.d = f.Dispatcher(dispatcher.Config{Conn: nc})
	cfg.Dispatcher = f.d
	if cfg.Conn == nil {
		cfg.Conn = nc
	}
	var err error
	f.h, err = httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	fleettest.WaitCatalog(t, f.d, names...)
	return f
}

func (f *fleet) tools() []windlass.Tool {
	return []windlass.Tool{
		windlass.MustFunc("add", func(ctx context.Context, in addArgs) (float64, error) { return in.A + in.B, nil },
			windlass.WithDescription("Add two numbers.")),
		windlass.MustFunc("slow", func(ctx context.Context, in slowArgs) (string, error) {
			windlass.ReportProgress(ctx, 0.5, "halfway")
			t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return fmt.Sprintf("slept %dms", in.MS), nil
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}, windlass.WithDescription("Sleep for ms milliseconds."), windlass.WithTimeout(5*time.Minute)),
		windlass.MustFunc("fail", func(ctx context.Context, in failArgs) (string, error) { return "", errors.New(in.Why) },
			windlass.WithDescription("Fail with a reason.")),
		windlass.MustFunc("count", func(ctx context.Context, _ struct{}) (int64, error) { return f.runs.Add(1), nil },
			windlass.WithDescription("Count its executions.")),
	}
}

// response is an HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// decode unmarshals the body into v, failing the test if it cannot.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r, err)
	}
}

// errorCode is the code of an error body ("" when there is none).
func (r response) errorCode() windlass.ErrorCode {
	var e httpapi.ErrorBody
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// do sends a request with a JSON body (when body is not "") and the
// fleet's key.
func (f *fleet) do(method, path, body string) response {
	f.t.Helper()
	return f.send(method, path, body, func(r *http.Request) {
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
	})
}

// send sends a request; edit adjusts it before it goes.
func (f *fleet) send(method, path, body string, edit func(*http.Request)) response {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), cmp.Or(f.timeout, 90*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if f.key != "" {
		req.Header.Set("Authorization", "Bearer "+f.key)
	}
	if edit != nil {
		edit(req)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// call decodes a response's call, checking the status.
func (f *fleet) call(r response, wantStatus int) httpapi.Call {
	f.t.Helper()
	if r.status != wantStatus {
		f.t.Fatalf("got %s, want status %d", r, wantStatus)
	}
	var c httpapi.Call
	r.decode(f.t, &c)
	return c
}

// pollUntil GETs a call until cond holds, failing after a deadline.
func (f *fleet) pollUntil(id, what string, cond func(httpapi.Call) bool) httpapi.Call {
	f.t.Helper()
	var c httpapi.Call
	fleettest.WaitFor(f.t, 60*time.Second, what, func() bool {
		c = f.call(f.do("GET", "/v1/calls/"+id, ""), http.StatusOK)
		return cond(c)
	})
	return c
}
