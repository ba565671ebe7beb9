package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one test's fleet (see fleettest) and a dispatcher on it.
type env struct {
	*fleettest.Fleet
	t *testing.T
	d *dispatcher.Dispatcher
}

// newEnv starts a fleet with a worker serving tools, when there are any,
// and a dispatcher, and waits until the dispatcher's catalog lists the
// tools.
func newEnv(t *testing.T, tools ...windlass.Tool) *env {
	t.Helper()
	e := &env{Fleet: fleettest.New(t), t: t}
	names := make([]string, len(tools))
	for i, tool := range tools {
		names[i] = tool.Spec().Name
	}
	if len(tools) > 0 {
		e.StartWorker(worker.Config{}, tools...)
	}
	e.d = e.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, e.d, names...)
	return e
}

type greetArgs struct {
	Name string `json:"name"`
}

func greet() windlass.Tool {
	return windlass.MustFunc("greet", func(ctx context.Context, in greetArgs) (string, error) {
		if in.Name == "" {
			return "", errors.New("no name")
		}
		return "hello " + in.Name, nil
	}, windlass.WithDescription("Greet someone."))
}

func point() windlass.Tool {
	return windlass.MustFunc("point", func(ctx context.Context, _ struct{}) (map[string]int, error) {
		return map[string]int{"x": 1, "y": 2}, nil
	})
}

func TestFleetToolIsIndistinguishableFromLocal(t *testing.T) {
	t.Parallel()
	local := []windlass.Tool{greet(), point()}
	e := newEnv(t, local...)
	cases := []struct {
		tool windlass.Tool
		args string
	}{
		{local[0], `{"name":"ada"}`},
		{local[0], `{"name":""}`}, // the tool's error
		{local[0], `{"name":7}`},  // invalid arguments
		{local[1], `{}`},          // a structured value
	}
	for _, c := range cases {
		remote, err := e.d.Tool(c.tool.Spec().Name)
		if err != nil {
			t.Fatal(err)
		}
		if remote.Spec().Hash() != c.tool.Spec().Hash() {
			t.Errorf("remote spec %+v differs from local %+v", remote.Spec(), c.tool.Spec())
		}
		call := windlass.ToolCall{ID: windlass.NewCallID(), Arguments: json.RawMessage(c.args)}
		l := windlass.Invoke(t.Context(), c.tool, call)
		call.ID = windlass.NewCallID()
		r := windlass.Invoke(t.Context(), remote, call)
		if l.Content != r.Content || l.IsError != r.IsError || l.Code() != r.Code() || string(l.Data) != string(r.Data) {
			t.Errorf("%s %s:\nlocal  %+v\nremote %+v", c.tool.Spec().Name, c.args, l, r)
		}
	}
	if _, err := e.d.Tool("missing"); err == nil {
		t.Error("Tool(missing) succeeded")
	}
}

func TestToolsInEveryStyle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet(), point())
	for _, style := range windlass.Styles {
		tools, err := e.d.Tools(t.Context(), style)
		if err != nil || len(tools) != 2 {
			t.Fatalf("Tools(%s) = %v, %v", style, tools, err)
		}
		want, _ := greet().Spec().Schema(style)
		got, _ := json.Marshal(tools[0])
		w, _ := json.Marshal(want)
		if string(got) != string(w) {
			t.Errorf("Tools(%s)[0] = %s, want %s", style, got, w)
		}
	}
	if _, err := e.d.Tools(t.Context(), "xml"); !errors.Is(err, windlass.ErrUnknownStyle) {
		t.Errorf("unknown style: %v", err)
	}
}

func TestGatedCallsGoToTheApprovalSubject(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	gated := windlass.MustFunc("pay", func(ctx context.Context, _ struct{}) (string, error) {
		runs.Add(1)
		return "paid", nil
	}, windlass.WithApproval())
	e := newEnv(t, gated)
	id, err := e.d.Submit(t.Context(), "pay", nil, dispatcher.WithMetadata(map[string]string{"requester": "agent-7"}))
	if err != nil {
		t.Fatal(err)
	}
	js := e.JetStream()
	s, err := js.Stream(t.Context(), layout.ApprovalsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), layout.ApprovalSubject("pay"))
	if err != nil {
		t.Fatalf("the gated call is not on the approval subject: %v", err)
	}
	var call windlass.ToolCall
	if err := json.Unmarshal(m.Data, &call); err != nil || call.ID != id || call.Metadata["requester"] != "agent-7" || m.Header.Get(layout.HeaderOrigin) != e.d.ID() {
		t.Errorf("approval message = %+v (%v), headers %v", call, err, m.Header)
	}
	calls, _ := js.Stream(t.Context(), layout.CallsStream)
	if info, _ := calls.Info(t.Context()); info.State.Msgs != 0 || runs.Load() != 0 {
		t.Errorf("a gated call reached the tool's subject: %d messages, %d runs", info.State.Msgs, runs.Load())
	}
	// Until the approval service decides, the caller waits and times out.
	r, _ := e.d.Call(t.Context(), "pay", nil, dispatcher.WithTimeout(300*time.Millisecond))
	if r.Code() != windlass.CodeTimeout {
		t.Errorf("gated Call = %+v", r)
	}
}

func TestSameCallIDRunsOnce(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	counted := windlass.MustFunc("count", func(ctx context.Context, _ struct{}) (int64, error) { return runs.Add(1), nil })
	e := newEnv(t, counted)
	for range 3 {
		if _, err := e.d.Submit(t.Context(), "count", nil, dispatcher.WithCallID("toolu_01ABC")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := e.d.Wait(ctx, "toolu_01ABC")
	if err != nil || r.Content != "1" {
		t.Fatalf("Wait = %+v, %v", r, err)
	}
	time.Sleep(300 * time.Millisecond) // room for a duplicate execution, which must not happen
	if runs.Load() != 1 {
		t.Errorf("the tool ran %d times for one call id", runs.Load())
	}
}

func TestWaitIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := e.d.Wait(ctx, "never-submitted"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Wait = %v after %s", err, time.Since(start))
	}
	if _, err := e.d.Result(t.Context(), "never-submitted"); !errors.Is(err, dispatcher.ErrNoResult) {
		t.Errorf("Result = %v", err)
	}
	if _, err := e.d.Wait(t.Context(), "bad id"); err == nil || !strings.Contains(err.Error(), "call id") {
		t.Errorf("Wait(bad id) = %v", err)
	}
}

func TestClosedDispatcher(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	if err := e.d.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := e.d.Call(t.Context(), "greet", map[string]string{"name": "x"})
	if !errors.Is(err, dispatcher.ErrClosed) || r.Code() != windlass.CodeUnavailable {
		t.Errorf("Call after Close = %+v, %v", r, err)
	}
	if _, err := e.d.Catalog(t.Context()); !errors.Is(err, dispatcher.ErrClosed) {
		t.Errorf("Catalog after Close = %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := dispatcher.New(t.Context(), dispatcher.Config{}); err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("no conn: %v", err)
	}
	nc := testserver.StartNATS(t).Connect(t)
	if _, err := dispatcher.New(t.Context(), dispatcher.Config{Conn: nc}); err == nil || !strings.Contains(err.Error(), "Registry") {
		t.Errorf("no registry: %v", err)
	}
}

func TestStatusWithoutApprovalService(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	id, err := e.d.Submit(t.Context(), "greet", map[string]string{"name": "ada"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := e.d.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The stream stores a result a moment after Wait saw it live.
	var st dispatcher.CallStatus
	fleettest.WaitFor(t, 10*time.Second, "the result stored", func() bool {
		st, err = e.d.Status(t.Context(), id)
		return err != nil || st.State == dispatcher.StateFinished
	})
	if err != nil || st.State != dispatcher.StateFinished || st.Result.Content != "hello ada" {
		t.Errorf("Status = %+v, %v", st, err)
	}
	if st, err := e.d.Status(t.Context(), "nobody"); err != nil || st.State != dispatcher.StateUnknown {
		t.Errorf("Status(unknown, no approval service) = %+v, %v", st, err)
	}
}

func TestCallRetriedWithTheSameIDOnAnotherInstance(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	counted := windlass.MustFunc("count", func(ctx context.Context, _ struct{}) (int64, error) { return runs.Add(1), nil })
	e := newEnv(t, counted)
	if _, err := e.d.Submit(t.Context(), "count", nil, dispatcher.WithCallID("model-call-1")); err != nil {
		t.Fatal(err)
	}
	other := e.another()
	defer other.Close()
	fleettest.WaitCatalog(t, other, "count")
	start := time.Now()
	r, err := other.Call(t.Context(), "count", nil, dispatcher.WithCallID("model-call-1"), dispatcher.WithTimeout(10*time.Second))
	if err != nil || r.Content != "1" || time.Since(start) > 5*time.Second {
		t.Errorf("retried Call = %+v, %v after %s: want the first run's result at once", r, err, time.Since(start))
	}
	if runs.Load() != 1 {
		t.Errorf("ran %d times", runs.Load())
	}
}

// advertiseUnserved advertises spec for a worker that never pulls (its
// calls stay queued), withdrawn when the test ends, and waits until the
// dispatcher's view has it.
func (e *env) advertiseUnserved(spec windlass.Spec) {
	e.t.Helper()
	lease, err := e.Registry().Advertise(e.t.Context(), registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = lease.Withdraw(context.Background()) })
	fleettest.WaitFor(e.t, 5*time.Second, "the tool in the dispatcher's view", func() bool {
		_, err := e.d.Tool(spec.Name)
		return err == nil
	})
}

// TestStalePinIsRefusedBeforeEnqueue: a call pinned (WithSpecHash) to a
// spec the fleet no longer serves is refused spec_mismatch before it is
// queued, carrying the tool's current definition in the caller's style;
// a call pinned to the current spec runs.
func TestStalePinIsRefusedBeforeEnqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	catalog, err := e.d.Catalog(t.Context())
	if err != nil || len(catalog) != 1 {
		t.Fatalf("catalog %v, %v", catalog, err)
	}
	current := catalog[0].Hash
	stale := windlass.MustFunc("greet", func(ctx context.Context, in struct{}) (string, error) { return "", nil },
		windlass.WithDescription("The greet the model saw.")).Spec().Hash()
	if stale == current {
		t.Fatal("the old spec has the current hash")
	}

	r, err := e.d.Call(t.Context(), "greet", greetArgs{Name: "ada"}, dispatcher.WithSpecHash(stale), dispatcher.WithStyle(windlass.StyleAnthropic), dispatcher.WithCallID("stale-call"))
	if err != nil || r.Code() != windlass.CodeSpecMismatch || !strings.Contains(r.Content, `"input_schema"`) || !strings.Contains(r.Content, current) {
		t.Errorf("Call pinned to a stale spec = %+v, %v; want spec_mismatch with the anthropic definition and the current hash", r, err)
	}
	_, err = e.d.Submit(t.Context(), "greet", greetArgs{Name: "ada"}, dispatcher.WithSpecHash(stale), dispatcher.WithCallID("stale-submit"))
	var sme *dispatcher.SpecMismatchError
	var ce *windlass.CallError
	if !errors.As(err, &sme) || !errors.As(err, &ce) || ce.Code != windlass.CodeSpecMismatch {
		t.Fatalf("Submit pinned to a stale spec: %v; want a *SpecMismatchError, code spec_mismatch", err)
	}
	def, derr := sme.Definition()
	if sme.Pinned != stale || sme.CurrentHash != current || sme.Style != windlass.DefaultStyle || derr != nil || def["type"] != "function" {
		t.Errorf("refusal %+v, definition %v (%v); want the pin, the current hash and the openai definition", sme, def, derr)
	}
	for _, id := range []string{"stale-call", "stale-submit"} {
		if st, err := e.d.Status(t.Context(), id); err != nil || st.State != dispatcher.StateUnknown {
			t.Errorf("Status(%s) = %+v, %v; want unknown: nothing queued", id, st, err)
		}
	}
	if r, err := e.d.Call(t.Context(), "greet", greetArgs{Name: "ada"}, dispatcher.WithSpecHash(current)); err != nil || r.Content != "hello ada" {
		t.Errorf("Call pinned to the current spec = %+v, %v; want it run", r, err)
	}
}
