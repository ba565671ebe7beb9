package approval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is a whole gated fleet (see fleettest): a worker with the gated
// tool pay, a dispatcher, and the approval service with its HTTP API.
type fleet struct {
	*fleettest.Fleet
	t       *testing.T
	d       *dispatcher.Dispatcher
	signer  *release.Signer
	runs    atomic.Int64
	svc     *approval.Service
	api     *httptest.Server
	stopSvc func()
	cfg     approval.Config
	tokens  map[string]string // reviewer -> token
	events  chan approval.AuditEvent
}

type payArgs struct {
	To     string  `json:"to"`
	Amount float64 `json:"amount" jsonschema:"minimum=0"`
	Memo   string  `json:"memo,omitempty"`
}

// newFleet starts the fleet; extra tools run on the same worker beside pay.
func newFleet(t *testing.T, policies map[string]approval.ToolPolicy, extra ...windlass.Tool) *fleet {
	t.Helper()
	return newFleetWith(t, policies, windlass.WithApproval(), extra...)
}

// newFleetWith is newFleet with pay gated by gate (WithApproval, or
// WithApprovalCondition).
func newFleetWith(t *testing.T, policies map[string]approval.ToolPolicy, gate windlass.FuncOption, extra ...windlass.Tool) *fleet {
	t.Helper()
	f := &fleet{Fleet: fleettest.New(t, fleettest.WithRedis(testserver.RedisOptions{Persist: true})), t: t, tokens: map[string]string{}, events: make(chan approval.AuditEvent, 100)}
	priv, _, _ := release.GenerateKey()
	key, _ := release.ParsePrivateKey(priv)
	f.signer = release.NewSigner(key)
	pub, _ := release.ParsePublicKey(f.signer.PublicKey())

	pay := windlass.MustFunc("pay", func(ctx context.Context, in payArgs) (string, error) {
		f.runs.Add(1)
		if in.Memo != "" {
			return fmt.Sprintf("paid %.2f to %s (a memo of %d bytes)", in.Amount, in.To, len(in.Memo)), nil
		}
		return fmt.Sprintf("paid %.2f to %s", in.Amount, in.To), nil
	}, gate)
	f.StartWorker(worker.Config{Releases: release.NewVerifier(pub)}, append([]windlass.Tool{pay}, extra...)...)
	f.d = f.Dispatcher(dispatcher.Config{})
	names := []string{"pay"}
	for _, tool := range extra {
		names = append(names, tool.Spec().Name)
	}
	fleettest.WaitCatalog(t, f.d, names...)

	var reviewers []approval.Reviewer
	for _, name := range []string{"alice", "bob", "carol"} {
		tok := approval.NewToken()
		f.tokens[name] = tok
		reviewers = append(reviewers, approval.Reviewer{Name: name, TokenSHA256: approval.HashToken(tok)})
	}
	f.cfg = approval.Config{Conn: f.Conn(), Redis: f.Redis.Client(t), Registry: f.Registry(), Signer: f.signer,
		Reviewers: reviewers, Policies: policies,
		Notify: func(ctx context.Context, ev approval.AuditEvent, _ *approval.HeldCall) error {
			select {
			case f.events <- ev:
			default:
			}
			return nil
		}}
	f.startService()
	return f
}

func (f *fleet) startService() {
	f.t.Helper()
	svc, err := approval.New(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	api := httptest.NewServer(svc.Handler())
	f.api = api
	var once sync.Once
	f.stopSvc = func() { once.Do(func() { api.Close(); cancel(); <-done }) }
	f.t.Cleanup(f.stopSvc)
}

// held waits until the call is held and returns it.
func (f *fleet) held(id string) *approval.HeldCall {
	f.t.Helper()
	var h *approval.HeldCall
	fleettest.WaitFor(f.t, 5*time.Second, "call "+id+" held", func() bool {
		var err error
		h, err = f.svc.Get(context.Background(), id)
		return err == nil
	})
	return h
}

// do sends an API request as reviewer ("" for none) and decodes the answer.
func (f *fleet) do(method, path, reviewer string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, f.api.URL+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if reviewer != "" {
		tok := f.tokens[reviewer]
		if tok == "" {
			tok = reviewer // a literal wrong token
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (f *fleet) submit(args payArgs, opts ...dispatcher.CallOption) string {
	f.t.Helper()
	id, err := f.d.Submit(f.t.Context(), "pay", args, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fleet) wait(id string) windlass.ToolResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 10*time.Second)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil {
		f.t.Fatalf("Wait(%s): %v", id, err)
	}
	return r
}

func TestApproveRunsTheCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	results := make(chan windlass.ToolResult, 1)
	go func() {
		r, _ := f.d.Call(context.Background(), "pay", payArgs{To: "bob", Amount: 5}, dispatcher.WithCallID("pay-1"),
			dispatcher.WithMetadata(map[string]string{"requester": "agent-1"}))
		results <- r
	}()
	h := f.held("pay-1")
	if h.Status != approval.StatusPending || h.Requester != "agent-1" || string(h.Arguments) != `{"to":"bob","amount":5}` || f.runs.Load() != 0 {
		t.Fatalf("held = %+v (runs %d)", h, f.runs.Load())
	}
	code, body := f.do("POST", "/v1/approvals/pay-1/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	if code != http.StatusOK || body["status"] != "approved" || body["released"] != true {
		t.Fatalf("approve = %d %v", code, body)
	}
	r := <-results
	if r.IsError || r.Content != "paid 5.00 to bob" || f.runs.Load() != 1 {
		t.Fatalf("result = %+v (runs %d)", r, f.runs.Load())
	}
	// A second decision answers 409 with the first one.
	code, body = f.do("POST", "/v1/approvals/pay-1/reject", "bob", map[string]any{"reason": "late"})
	if code != http.StatusConflict || body["call"].(map[string]any)["status"] != "approved" {
		t.Errorf("second decision = %d %v", code, body)
	}
	audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{Limit: 100})
	var kinds []string
	for _, ev := range audit {
		kinds = append(kinds, ev.Event+":"+ev.Actor)
	}
	if got := strings.Join(kinds, " "); got != "requested:agent-1 approved:alice released:system" {
		t.Errorf("audit = %s", got)
	}
}

func TestRejectAnswersTheCaller(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "mallory", Amount: 1e6})
	f.held(id)
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": "looks like fraud"}); code != http.StatusOK || body["rejected_by"] != "carol" {
		t.Fatalf("reject = %d %v", code, body)
	}
	r := f.wait(id)
	if r.Code() != windlass.CodeRejected || !strings.Contains(r.Content, "carol") || !strings.Contains(r.Content, "looks like fraud") || f.runs.Load() != 0 {
		t.Errorf("result = %+v (runs %d)", r, f.runs.Load())
	}
}

// TestUndecodableHeldCall: a held call whose stored call no longer
// decodes (a record damaged in Redis) is still listed (listing decodes no
// call), and approving it releases nothing.
func TestUndecodableHeldCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 2})
	h := f.held(id)
	if err := f.cfg.Redis.HSet(t.Context(), approval.DefaultPrefix+"call:{"+id+"}", "call", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	code, body := f.do("GET", "/v1/approvals?status=pending", "alice", nil)
	items, _ := body["items"].([]any)
	if code != http.StatusOK || len(items) != 1 || items[0].(map[string]any)["id"] != id {
		t.Fatalf("list with a damaged record = %d %v", code, body)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code == http.StatusOK && body["released"] == true {
		t.Fatalf("approving a damaged record released it: %d %v", code, body)
	}
	if f.runs.Load() != 0 {
		t.Fatalf("the damaged call ran %d times", f.runs.Load())
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {Window: 300 * time.Millisecond}})
	id := f.submit(payArgs{To: "bob", Amount: 1})
	h := f.held(id)
	r := f.wait(id)
	if r.Code() != windlass.CodeExpired || f.runs.Load() != 0 {
		t.Fatalf("result = %+v", r)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusConflict || body["call"].(map[string]any)["status"] != "expired" {
		t.Errorf("approving an expired call = %d %v", code, body)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 1})
	h := f.held(id)
	for _, who := range []string{"", "wlr_not-a-token"} {
		for _, path := range []string{"/v1/approvals", "/v1/approvals/" + id} {
			if code, _ := f.do("GET", path, who, nil); code != http.StatusUnauthorized {
				t.Errorf("GET %s as %q = %d, want 401", path, who, code)
			}
		}
		if code, _ := f.do("POST", "/v1/approvals/"+id+"/approve", who, map[string]any{"args_hash": h.ArgsHash}); code != http.StatusUnauthorized {
			t.Errorf("approve as %q = %d, want 401", who, code)
		}
	}
	if f.held(id).Status != approval.StatusPending {
		t.Error("an unauthenticated request decided the call")
	}
	code, body := f.do("GET", "/v1/approvals?status=pending&tool=pay", "bob", nil)
	if items, _ := body["items"].([]any); code != http.StatusOK || len(items) != 1 {
		t.Errorf("list = %d %v", code, body)
	}
	// A form post (not JSON) is refused: no cross-site request forgery.
	req, _ := http.NewRequest("POST", f.api.URL+"/v1/approvals/"+id+"/reject", strings.NewReader("reason=x"))
	req.Header.Set("Authorization", "Bearer "+f.tokens["bob"])
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("form post = %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", f.api.URL+"/v1/approvals/"+id+"/reject", strings.NewReader(`{"reason":"x"}`))
	req.Header.Set("Authorization", "Bearer "+f.tokens["bob"])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin post = %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
}

func TestDecisionBoundToWhatTheReviewerSaw(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 5})
	h := f.held(id)
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": strings.Repeat("0", 64)}); code != http.StatusPreconditionFailed {
		t.Errorf("stale hash = %d %v", code, body)
	}
	// Edited arguments are validated against the tool's schema.
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash, "arguments": map[string]any{"to": "bob", "amount": -3}}); code != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(body), "$.amount") {
		t.Errorf("invalid edit = %d %v", code, body)
	}
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash, "arguments": map[string]any{"to": "bob", "amount": 4}})
	if code != http.StatusOK {
		t.Fatalf("valid edit = %d %v", code, body)
	}
	if r := f.wait(id); r.Content != "paid 4.00 to bob" {
		t.Errorf("result = %+v: the edited arguments must run", r)
	}
	audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{Limit: 100})
	var edit *approval.AuditEvent
	for i := range audit {
		if audit[i].Event == "edited" {
			edit = &audit[i]
		}
	}
	if edit == nil || edit.Fields["before"] != `{"to":"bob","amount":5}` || edit.Fields["after"] != `{"amount":4,"to":"bob"}` || edit.Actor != "alice" {
		t.Errorf("edit audit = %+v", edit)
	}
}

func TestSeparationOfDutiesAndTwoApprovers(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {RequiredApprovals: 2, ForbidSelfApproval: true}})
	id := f.submit(payArgs{To: "x", Amount: 1}, dispatcher.WithMetadata(map[string]string{"requester": "alice"}))
	h := f.held(id)
	approve := func(who string) (int, map[string]any) {
		return f.do("POST", "/v1/approvals/"+id+"/approve", who, map[string]any{"args_hash": h.ArgsHash})
	}
	if code, _ := approve("alice"); code != http.StatusForbidden {
		t.Errorf("self approval = %d", code)
	}
	if code, body := approve("bob"); code != http.StatusOK || body["status"] != "pending" {
		t.Errorf("first of two = %d %v", code, body)
	}
	if code, _ := approve("bob"); code != http.StatusConflict {
		t.Errorf("same reviewer twice = %d", code)
	}
	if f.runs.Load() != 0 {
		t.Fatal("ran after one of two approvals")
	}
	if code, body := approve("carol"); code != http.StatusOK || body["status"] != "approved" {
		t.Errorf("second approver = %d %v", code, body)
	}
	if r := f.wait(id); r.IsError {
		t.Errorf("result = %+v", r)
	}
}

func TestConcurrentDecisionsDecideOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	for round := range 5 {
		id := f.submit(payArgs{To: "r", Amount: float64(round)})
		h := f.held(id)
		var wg sync.WaitGroup
		codes := make([]int, 2)
		start := make(chan struct{})
		for i, who := range []string{"alice", "bob"} {
			wg.Go(func() {
				<-start
				if i == 0 {
					codes[i], _ = f.do("POST", "/v1/approvals/"+id+"/approve", who, map[string]any{"args_hash": h.ArgsHash})
				} else {
					codes[i], _ = f.do("POST", "/v1/approvals/"+id+"/reject", who, map[string]any{"reason": "race"})
				}
			})
		}
		close(start)
		wg.Wait()
		ok, conflict := 0, 0
		for _, c := range codes {
			switch c {
			case http.StatusOK:
				ok++
			case http.StatusConflict:
				conflict++
			}
		}
		if ok != 1 || conflict != 1 {
			t.Errorf("round %d: codes %v, want one 200 and one 409", round, codes)
		}
		f.wait(id)
	}
}

func TestRestartLosesNoHeldCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	var ids []string
	for i := range 5 {
		ids = append(ids, f.submit(payArgs{To: "r", Amount: float64(i)}))
	}
	for _, id := range ids {
		f.held(id)
	}
	f.stopSvc()
	f.Redis.Restart(t) // persistent: the held calls are on disk
	more := f.submit(payArgs{To: "while down", Amount: 9})
	f.startService()
	for _, id := range append(ids, more) {
		h := f.held(id)
		if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusOK {
			t.Errorf("approve %s after restart = %d %v", id, code, body)
		}
	}
	for _, id := range append(ids, more) {
		if r := f.wait(id); r.IsError {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if f.runs.Load() != 6 {
		t.Errorf("runs = %d, want 6", f.runs.Load())
	}
}

func TestNotifyGetsEveryEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "n", Amount: 1})
	h := f.held(id)
	f.do("POST", "/v1/approvals/"+id+"/approve", "bob", map[string]any{"args_hash": h.ArgsHash})
	var got []string
	timeout := time.After(5 * time.Second)
	for len(got) < 3 {
		select {
		case ev := <-f.events:
			got = append(got, ev.Event)
		case <-timeout:
			t.Fatalf("events = %v", got)
		}
	}
	if strings.Join(got, ",") != "requested,approved,released" {
		t.Errorf("events = %v", got)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := approval.New(approval.Config{}); err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("empty config: %v", err)
	}
	if _, err := approval.ParseReviewer("alice"); err == nil {
		t.Error("reviewer without a hash accepted")
	}
	if !errors.Is(approval.ErrNotFound, approval.ErrNotFound) {
		t.Fatal()
	}
}

func TestSubmitThenStatusReadsAwaitingApproval(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "s", Amount: 2})
	h := f.held(id)
	st, err := f.d.Status(t.Context(), id)
	if err != nil || st.State != dispatcher.StateAwaitingApproval || st.Approval == nil || st.Approval.RequiredApprovals != 1 || st.Approval.ExpiresAt.IsZero() {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash})
	f.wait(id)
	// The stream stores a result a moment after Wait saw it live.
	fleettest.WaitFor(t, 10*time.Second, "the result stored", func() bool {
		st, err = f.d.Status(t.Context(), id)
		return err != nil || st.State == dispatcher.StateFinished
	})
	if err != nil || st.State != dispatcher.StateFinished || st.Result == nil || st.Result.IsError {
		t.Errorf("Status after the run = %+v, %v", st, err)
	}
	if st, err := f.d.Status(t.Context(), "never-seen"); err != nil || st.State != dispatcher.StateUnknown {
		t.Errorf("Status(unknown) = %+v, %v", st, err)
	}
}

// cancelCall cancels a call through the dispatcher, retrying while the
// dispatcher does not know it yet (its queued event is a plain publish the
// events stream stores a moment later).
func (f *fleet) cancelCall(id, reason string) {
	f.t.Helper()
	fleettest.WaitFor(f.t, 10*time.Second, "call "+id+" known to the dispatcher, to cancel it", func() bool {
		err := f.d.Cancel(f.t.Context(), id, reason)
		if err != nil && !errors.Is(err, dispatcher.ErrUnknownCall) {
			f.t.Fatalf("Cancel(%s): %v", id, err)
		}
		return err == nil
	})
}

// callsStreamLastSeq is the calls stream's last sequence: a release would
// move it.
func (f *fleet) callsStreamLastSeq() uint64 {
	f.t.Helper()
	js := f.JetStream()
	s, err := js.Stream(f.t.Context(), "WINDLASS_CALLS")
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.LastSeq
}

func TestCancelHeldCall(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		webhooks []map[string]any // approval.canceled payloads
	)
	secret := webhook.NewSecret()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]webhook.Secret{secret}, r.Header, body, 0); err != nil {
			t.Errorf("webhook signature: %v", err)
		}
		var p struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		_ = json.Unmarshal(body, &p)
		if p.Type == "approval.canceled" {
			mu.Lock()
			webhooks = append(webhooks, p.Data)
			mu.Unlock()
		}
	}))
	defer receiver.Close()
	sender, err := webhook.New(webhook.Config{Endpoints: []webhook.Endpoint{{URL: receiver.URL, Secrets: []webhook.Secret{secret}}}, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseIdleConnections()

	f := newFleet(t, nil)
	f.stopSvc()
	f.cfg.Webhooks = sender
	f.startService()

	id := f.submit(payArgs{To: "mallory", Amount: 7})
	h := f.held(id)
	seqBefore := f.callsStreamLastSeq()
	f.cancelCall(id, "the user changed their mind")

	// The caller is answered canceled.
	if r := f.wait(id); r.Code() != windlass.CodeCanceled || !strings.Contains(r.Content, "changed their mind") {
		t.Errorf("result = %+v, want canceled with the reason", r)
	}
	// The approval API shows it canceled (the service follows the cancels
	// stream asynchronously).
	var body map[string]any
	fleettest.WaitFor(t, 10*time.Second, "GET the canceled call showing status canceled", func() bool {
		var code int
		code, body = f.do("GET", "/v1/approvals/"+id, "alice", nil)
		return code == http.StatusOK && body["status"] == "canceled"
	})
	if body["reason"] != "the user changed their mind" || body["released"] != false || body["decided_at"] == nil {
		t.Errorf("canceled call = %v", body)
	}
	// It left the pending set and is listed as canceled.
	if code, list := f.do("GET", "/v1/approvals?status=pending", "alice", nil); code != http.StatusOK || len(list["items"].([]any)) != 0 {
		t.Errorf("pending list = %d %v, want empty", code, list)
	}
	if code, list := f.do("GET", "/v1/approvals?status=canceled", "alice", nil); code != http.StatusOK || len(list["items"].([]any)) != 1 {
		t.Errorf("canceled list = %d %v, want the call", code, list)
	}
	// Decisions on it are refused with 409, and nothing is released.
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusConflict || body["call"].(map[string]any)["status"] != "canceled" {
		t.Errorf("approve after cancel = %d %v, want 409 with status canceled", code, body)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "bob", map[string]any{"reason": "x"}); code != http.StatusConflict {
		t.Errorf("reject after cancel = %d %v, want 409", code, body)
	}
	if seq := f.callsStreamLastSeq(); seq != seqBefore {
		t.Errorf("the calls stream moved from %d to %d: the canceled call was released", seqBefore, seq)
	}
	if n := f.runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
	// The audit log records the cancellation, once, and no release.
	audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{Limit: 100})
	var kinds []string
	for _, ev := range audit {
		kinds = append(kinds, ev.Event+":"+ev.Actor)
		if ev.Event == "canceled" && ev.Fields["reason"] != "the user changed their mind" {
			t.Errorf("canceled audit event = %+v, want the reason", ev)
		}
	}
	if got := strings.Join(kinds, " "); got != "requested: canceled:caller" {
		t.Errorf("audit = %q, want requested then canceled by the caller", got)
	}
	// The dashboard's webhook gets approval.canceled with the call.
	fleettest.WaitFor(t, 10*time.Second, "an approval.canceled webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(webhooks) > 0
	})
	mu.Lock()
	if d := webhooks[0]; d["call_id"] != id || d["call"].(map[string]any)["status"] != "canceled" || d["actor"] != "caller" {
		t.Errorf("approval.canceled data = %v, want the canceled call and actor caller", d)
	}
	mu.Unlock()
	// Status from any dispatcher: finished, canceled.
	fleettest.WaitFor(t, 5*time.Second, "Status finished, canceled", func() bool {
		st, err := f.d.Status(t.Context(), id)
		return err == nil && st.State == dispatcher.StateFinished && st.Result.Code() == windlass.CodeCanceled
	})
}

// TestCancelWinsOnTheDecisionPath cancels a held call while no service
// follows the cancels stream: a decision still finds the cancellation and
// is refused, and the service started afterwards keeps the call canceled.
func TestCancelWinsOnTheDecisionPath(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 3})
	h := f.held(id)
	f.stopSvc()
	f.cancelCall(id, "")

	idle, err := approval.New(f.cfg) // never Run: no follower
	if err != nil {
		t.Fatal(err)
	}
	_, err = idle.Approve(t.Context(), id, "alice", h.ArgsHash, nil)
	var decided *approval.DecidedError
	if !errors.As(err, &decided) || decided.Call.Status != approval.StatusCanceled || decided.Call.Released {
		t.Fatalf("Approve of a canceled call = %v, want a DecidedError with status canceled", err)
	}
	if got, err := idle.Get(t.Context(), id); err != nil || got.Status != approval.StatusCanceled {
		t.Errorf("Get = %+v, %v; want canceled", got, err)
	}
	if pending, _, err := idle.List(t.Context(), approval.Filter{}); err != nil || len(pending) != 0 {
		t.Errorf("pending = %v, %v; want none", pending, err)
	}
	f.startService()
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "bob", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusConflict {
		t.Errorf("approve after restart = %d %v, want 409", code, body)
	}
	if r := f.wait(id); r.Code() != windlass.CodeCanceled || f.runs.Load() != 0 {
		t.Errorf("result = %+v (runs %d), want canceled and never run", r, f.runs.Load())
	}
	audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{Limit: 100})
	canceled := 0
	for _, ev := range audit {
		if ev.Event == "canceled" {
			canceled++
		}
		if ev.Event == "released" || ev.Event == "approved" {
			t.Errorf("audit has %q for a canceled call", ev.Event)
		}
	}
	if canceled != 1 {
		t.Errorf("audit has %d canceled events, want 1", canceled)
	}
}

// TestCallCanceledBeforeIntake cancels a gated call while it still waits
// in the approvals stream (the service is down): when the service takes it
// in, it is canceled, not pending, and never released.
func TestCallCanceledBeforeIntake(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	f.stopSvc()
	id := f.submit(payArgs{To: "eve", Amount: 9})
	f.cancelCall(id, "too late")
	seqBefore := f.callsStreamLastSeq()
	f.startService()
	var h *approval.HeldCall
	fleettest.WaitFor(t, 10*time.Second, "the held call canceled", func() bool {
		h = f.held(id)
		return h.Status == approval.StatusCanceled
	})
	if pending, _, err := f.svc.List(t.Context(), approval.Filter{}); err != nil || len(pending) != 0 {
		t.Errorf("pending = %v, %v; want none", pending, err)
	}
	if code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash}); code != http.StatusConflict {
		t.Errorf("approve = %d %v, want 409", code, body)
	}
	if seq := f.callsStreamLastSeq(); seq != seqBefore || f.runs.Load() != 0 {
		t.Errorf("calls stream %d -> %d, runs %d: the canceled call was released", seqBefore, seq, f.runs.Load())
	}
}

// TestRequestHeaders checks how the API reads Content-Type and
// Authorization: a decision's Content-Type is the media type
// application/json (in any case, parameters allowed), not anything that
// starts with it; the Bearer scheme is case-insensitive (RFC 7235). A
// decision that passes the checks is sent with a wrong args_hash, so it
// gets 412 and leaves the call pending.
func TestRequestHeaders(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 1})
	f.held(id)
	send := func(method, path, contentType, authorization, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, f.api.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}

	contentTypes := []struct {
		contentType string
		want        int
	}{
		{"application/json", http.StatusPreconditionFailed},
		{"application/json; charset=utf-8", http.StatusPreconditionFailed},
		{"application/json ; charset=UTF-8", http.StatusPreconditionFailed},
		{"Application/JSON", http.StatusPreconditionFailed},
		{"APPLICATION/JSON; charset=utf-8", http.StatusPreconditionFailed},
		{"application/jsonx", http.StatusUnsupportedMediaType},
		{"application/json-seq", http.StatusUnsupportedMediaType},
		{"application/json;", http.StatusPreconditionFailed}, // an empty parameter list; the media type is JSON
		{"application/json; charset", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"", http.StatusUnsupportedMediaType},
	}
	for _, tc := range contentTypes {
		t.Run("ContentType="+tc.contentType, func(t *testing.T) {
			if got := send("POST", "/v1/approvals/"+id+"/approve", tc.contentType, "Bearer "+f.tokens["alice"], `{"args_hash":"not-what-alice-saw"}`); got != tc.want {
				t.Errorf("Content-Type %q: %d, want %d", tc.contentType, got, tc.want)
			}
		})
	}

	tok := f.tokens["bob"]
	authorizations := []struct {
		name, authorization string
		want                int
	}{
		{"Bearer", "Bearer " + tok, http.StatusOK},
		{"LowerCase", "bearer " + tok, http.StatusOK},
		{"UpperCase", "BEARER " + tok, http.StatusOK},
		{"MixedCase", "bEaReR " + tok, http.StatusOK},
		{"ExtraSpaces", "Bearer   " + tok + " ", http.StatusOK},
		{"NoSpace", "Bearer" + tok, http.StatusUnauthorized},
		{"Basic", "Basic " + tok, http.StatusUnauthorized},
		{"NoScheme", tok, http.StatusUnauthorized},
		{"SchemeOnly", "Bearer", http.StatusUnauthorized},
		{"WrongToken", "bearer wlr_wrong", http.StatusUnauthorized},
	}
	for _, tc := range authorizations {
		t.Run("Authorization="+tc.name, func(t *testing.T) {
			if got := send("GET", "/v1/approvals/"+id, "", tc.authorization, ""); got != tc.want {
				t.Errorf("Authorization %q: %d, want %d", tc.name, got, tc.want)
			}
		})
	}
	if f.held(id).Status != approval.StatusPending {
		t.Error("a header test decided the call")
	}
}
