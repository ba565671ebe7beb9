package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

type chargeArgs struct {
	Cents int `json:"cents"`
}

// chargeFleet is a fleet whose one tool, charge, counts its runs; the
// worker serving it can be stopped and another version started.
type chargeFleet struct {
	*fleet
	runs *atomic.Int64
}

func charge(runs *atomic.Int64, desc string) windlass.Tool {
	return windlass.MustFunc("charge", func(ctx context.Context, in chargeArgs) (int64, error) { return runs.Add(1), nil },
		windlass.WithDescription(desc))
}

func newChargeFleet(t *testing.T) (*chargeFleet, *fleettest.Worker) {
	ff := fleettest.New(t)
	runs := new(atomic.Int64)
	w := ff.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, charge(runs, "Charge a card, v1."))
	nc := ff.Conn()
	d := ff.Dispatcher(dispatcher.Config{Conn: nc})
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	fleettest.WaitCatalog(t, d, "charge")
	return &chargeFleet{fleet: &fleet{Fleet: ff, t: t, d: d, h: h, srv: srv, runs: runs}, runs: runs}, w
}

// TestARetryAfterARedeployIsTheCallAccepted: a client POSTs a call
// with its own id and a spec_hash pin; it runs, but the client's connection
// breaks before it reads the 200. Meanwhile the tool is redeployed with a
// new spec. The client retries the very same request. One id is one call:
// the retry must get the call's result (it ran, once) — not 409
// spec_mismatch saying "it was not run", which invites the model to call
// again under a new id and charge twice.
func TestARetryAfterARedeployIsTheCallAccepted(t *testing.T) {
	f, w1 := newChargeFleet(t)
	var list httpapi.ToolList
	f.do("GET", "/v1/tools", "").decode(t, &list)
	v1 := list.SpecHashes["charge"]
	body := `{"tool":"charge","arguments":{"cents":500},"id":"toolu_pay_1","spec_hash":"` + v1 + `"}`
	first := f.call(f.do("POST", "/v1/calls", body), http.StatusOK)
	if first.Result == nil || first.Result.Content != "1" || f.runs.Load() != 1 {
		t.Fatalf("first POST = %+v, runs %d", first.Result, f.runs.Load())
	}

	// Redeploy: v1's worker stops, v2's starts.
	if err := w1.Stop(); err != nil {
		t.Fatal(err)
	}
	f.StartWorker(worker.Config{Heartbeat: 50 * time.Millisecond}, charge(f.runs, "Charge a card, v2."))
	fleettest.WaitFor(t, 30*time.Second, "the dispatcher to see charge v2", func() bool {
		cat, _ := f.d.Catalog(t.Context())
		return len(cat) == 1 && cat[0].Hash != v1
	})

	// The client's retry of the request it never saw answered.
	r := f.do("POST", "/v1/calls", body)
	if r.status != http.StatusOK {
		t.Errorf("retry of call toolu_pay_1 (it ran once, result %q) = %s;\nwant 200 with that result: the same id is the same call", first.Result.Content, r)
	}
	if st := f.call(f.do("GET", "/v1/calls/toolu_pay_1", ""), http.StatusOK); st.State != dispatcher.StateFinished {
		t.Errorf("GET = %+v", st)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("charge ran %d times", n)
	}
}

// TestARetryWhileNoWorkerIsLiveGetsTheStoredResult: the same client retry,
// when the tool's only worker has gone (a rolling restart). The call ran
// and its result is stored; GET answers it. The retried POST is answered
// 503 no_worker — a refusal, "never queued" — for a call that ran.
func TestARetryWhileNoWorkerIsLiveGetsTheStoredResult(t *testing.T) {
	f, w1 := newChargeFleet(t)
	body := `{"tool":"charge","arguments":{"cents":500},"id":"toolu_pay_2"}`
	first := f.call(f.do("POST", "/v1/calls", body), http.StatusOK)
	if first.Result == nil || first.Result.Content != "1" {
		t.Fatalf("first POST = %+v", first.Result)
	}
	fleettest.StoredResult(t, f.JetStream(), "toolu_pay_2")
	if err := w1.Stop(); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitCatalog(t, f.d) // no live worker of charge
	if st := f.call(f.do("GET", "/v1/calls/toolu_pay_2", ""), http.StatusOK); st.Result == nil || st.Result.Content != "1" {
		t.Fatalf("GET = %+v", st)
	}
	r := f.do("POST", "/v1/calls", body)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"content":"1"`) {
		t.Errorf("retry of call toolu_pay_2 (it ran, its result stored) = %s;\nwant 200 with its result", r)
	}
}
