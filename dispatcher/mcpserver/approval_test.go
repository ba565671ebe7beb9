package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

type payArgs struct {
	To     string  `json:"to"`
	Amount float64 `json:"amount"`
}

// approvals is a running approval service with one reviewer, alice.
type approvals struct {
	t     *testing.T
	url   string
	token string
}

// startApprovals starts the approval service on f and returns it with the
// worker config that verifies its releases.
func (f *fleet) startApprovals() (*approvals, worker.Config) {
	f.t.Helper()
	priv, _, err := release.GenerateKey()
	if err != nil {
		f.t.Fatal(err)
	}
	key, err := release.ParsePrivateKey(priv)
	if err != nil {
		f.t.Fatal(err)
	}
	signer := release.NewSigner(key)
	pub, err := release.ParsePublicKey(signer.PublicKey())
	if err != nil {
		f.t.Fatal(err)
	}
	tok := approval.NewToken()
	svc, err := approval.New(approval.Config{Conn: f.Conn(), Redis: f.Redis.Client(f.t), Registry: f.Registry(), Signer: signer,
		Reviewers: []approval.Reviewer{{Name: "alice", TokenSHA256: approval.HashToken(tok)}}})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = svc.Run(ctx) })
	api := httptest.NewServer(svc.Handler())
	f.t.Cleanup(func() { api.Close(); cancel(); wg.Wait() })
	return &approvals{t: f.t, url: api.URL, token: tok},
		worker.Config{Releases: release.NewVerifier(pub)}
}

// do sends an API request as alice and decodes the answer.
func (a *approvals) do(method, path string, body any) (int, map[string]any) {
	a.t.Helper()
	var rd bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd.Reset(b)
	}
	req, err := http.NewRequest(method, a.url+path, &rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// approveOne waits for the one pending call of tool and approves it.
func (a *approvals) approveOne(tool string) {
	a.t.Helper()
	var held map[string]any
	fleettest.WaitFor(a.t, 30*time.Second, "a held call of "+tool, func() bool {
		code, body := a.do("GET", "/v1/approvals?status=pending&tool="+tool, nil)
		items, _ := body["items"].([]any)
		if code != http.StatusOK || len(items) == 0 {
			return false
		}
		held, _ = items[0].(map[string]any)
		return held != nil
	})
	code, body := a.do("POST", fmt.Sprintf("/v1/approvals/%s/approve", held["id"]), map[string]any{"args_hash": held["args_hash"]})
	if code != http.StatusOK || body["status"] != "approved" {
		a.t.Fatalf("approve = %d %v", code, body)
	}
}

// A gated call waits for approval; the client learns the call's id at once
// (first progress notification, log message), then gets the result.
func TestGatedToolAfterApproval(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	progress := make(chan *mcp.ProgressNotificationParams, 16)
	//lint:ignore SA1019 MCP logging is deprecated as of protocol 2026-07-28 but functional; the server sends the call id in a log message.
	logged := make(chan *mcp.LoggingMessageParams, 16)
	opts := progressTo(progress)
	//lint:ignore SA1019 as above.
	opts.LoggingMessageHandler = func(_ context.Context, req *mcp.LoggingMessageRequest) {
		select {
		case logged <- req.Params:
		default:
		}
	}
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})}), opts)
	//lint:ignore SA1019 as above: the client asks for log messages.
	if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if a := listTools(t, cs)["pay"].Annotations; a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Errorf("pay's annotations = %+v, want destructive, not read-only", a)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	done := callInBackground(ctx, cs, "pay", payArgs{To: "bob", Amount: 5}, mcp.Meta{"progressToken": 7})
	p := nextProgress(t, progress)
	id, _ := p.Meta[mcpserver.MetaCallID].(string)
	if id == "" || p.Progress != 0 || p.Total != 1 || p.Message != "waiting for a person's approval (call id "+id+")" {
		t.Errorf("first progress = %+v, want 0 of 1, waiting for approval, with the call id", p)
	}
	select {
	case l := <-logged:
		data, _ := l.Data.(map[string]any)
		if l.Level != "info" || data["call_id"] != id || data["tool"] != "pay" || !strings.Contains(fmt.Sprint(data["message"]), id) {
			t.Errorf("log message = %+v, want level info, data with call_id %s and tool pay", l, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no log message with the call id")
	}
	apr.approveOne("pay")
	o := receive(t, done)
	if o.err != nil || o.res.IsError || text(o.res) != "paid 5.00 to bob" || runs.Load() != 1 || o.res.Meta[mcpserver.MetaCallID] != id {
		t.Fatalf("result = %+v (%q), %v; runs %d", o.res, text(o.res), o.err, runs.Load())
	}
}
