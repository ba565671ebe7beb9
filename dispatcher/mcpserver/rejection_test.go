package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// heldCall is the approval service's record of call id, as its API
// answers it.
func (a *approvals) heldCall(id string) *approval.HeldCall {
	a.t.Helper()
	code, body := a.do("GET", "/v1/approvals/"+id, nil)
	raw, _ := json.Marshal(body)
	var h approval.HeldCall
	if err := json.Unmarshal(raw, &h); code != http.StatusOK || err != nil {
		a.t.Fatalf("GET /v1/approvals/%s = %d %s (%v)", id, code, raw, err)
	}
	return &h
}

// TestRejectionGuidanceReachesTheModel: a gated call rejected by a person
// is answered, through MCP and through the dispatcher's HTTP API alike,
// with the text approval.RejectedMessage builds: that a person declined
// this exact call, who, the reason, and whether the model may try again
// with changes or (rejected "do not retry") must not; it is an error
// result, not retryable, and the tool never ran.
func TestRejectionGuidanceReachesTheModel(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	apr, wcfg := f.startApprovals()
	var runs atomic.Int64
	f.startWorker(wcfg, payTool(&runs))
	d := f.Dispatcher(dispatcher.Config{})
	mh, err := mcpserver.New(t.Context(), mcpserver.Config{Dispatcher: d})
	if err != nil {
		t.Fatal(err)
	}
	key := httpapi.NewAPIKey()
	api, err := httpapi.New(httpapi.Config{Dispatcher: d, APIKeys: []httpapi.APIKey{{Name: "agent", SHA256: httpapi.HashAPIKey(key)}},
		Extra: map[string]http.Handler{"/mcp": mh}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = mh.Close() })
	cs := connectTransport(t, nil, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{key}}})

	// reject waits until call id is held, rejects it, and returns the
	// decided record.
	reject := func(id, reason string, noRetry bool) *approval.HeldCall {
		t.Helper()
		apr.waitHeld(id, "pending")
		code, body := apr.do("POST", "/v1/approvals/"+id+"/reject", map[string]any{"reason": reason, "no_retry": noRetry})
		if code != http.StatusOK || body["status"] != "rejected" || body["no_retry"] != noRetry {
			t.Fatalf("reject %s (no_retry %v) = %d %v", id, noRetry, code, body)
		}
		return apr.heldCall(id)
	}
	// guidance checks the text the model reads for a call rejected so.
	guidance := func(where, got string, h *approval.HeldCall) {
		t.Helper()
		want := []string{"A person reviewed this exact call to \"pay\" and declined it", "it was not run", "Rejected by alice", fmt.Sprintf("Reason: %q", h.Reason)}
		if h.NoRetry {
			want = append(want, "do not make this call again, with these or other arguments")
		} else {
			want = append(want, "You may try again only with changes that address the reason")
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the model reads %q; it does not say %q", where, got, w)
			}
		}
		if exact := approval.RejectedMessage(h); got != exact {
			t.Errorf("%s: the model reads %q, want approval.RejectedMessage's %q", where, got, exact)
		}
	}

	for _, noRetry := range []bool{true, false} {
		// Through MCP.
		mcpID := fmt.Sprintf("mcp-rejected-%v", noRetry)
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		done := callInBackground(ctx, cs, "pay", payArgs{To: "mallory", Amount: 9000}, mcp.Meta{mcpserver.MetaCallID: mcpID})
		h := reject(mcpID, "duplicate of yesterday's payment", noRetry)
		o := receive(t, done)
		cancel()
		if o.err != nil || !o.res.IsError || o.res.Meta[mcpserver.MetaErrorCode] != string(windlass.CodeRejected) {
			t.Fatalf("MCP result (no_retry %v) = %+v, %v; want isError with code rejected", noRetry, o.res, o.err)
		}
		guidance(fmt.Sprintf("MCP (no_retry %v)", noRetry), text(o.res), h)

		// Through the HTTP API: submitted async, read back with GET.
		httpID := fmt.Sprintf("http-rejected-%v", noRetry)
		if code, body := postJSON(t, srv.URL+"/v1/calls", key, map[string]any{"tool": "pay", "id": httpID, "async": true,
			"arguments": payArgs{To: "mallory", Amount: 9000}}); code != http.StatusAccepted {
			t.Fatalf("POST /v1/calls = %d %s", code, body)
		}
		h = reject(httpID, "the account is frozen", noRetry)
		var call struct {
			State  string `json:"state"`
			Result *struct {
				Content string `json:"content"`
				IsError bool   `json:"is_error"`
				Error   *struct {
					Code      string `json:"code"`
					Message   string `json:"message"`
					Retryable *bool  `json:"retryable"`
				} `json:"error"`
			} `json:"result"`
		}
		var raw []byte
		fleettest.WaitFor(t, 30*time.Second, "the HTTP call's result", func() bool {
			var code int
			code, raw = getJSON(t, srv.URL+"/v1/calls/"+httpID, key)
			return code == http.StatusOK && json.Unmarshal(raw, &call) == nil && call.Result != nil
		})
		r := call.Result
		if !r.IsError || r.Error == nil || r.Error.Code != string(windlass.CodeRejected) || r.Error.Retryable != nil {
			t.Fatalf("HTTP API result (no_retry %v) = %s; want is_error, code rejected, not retryable", noRetry, raw)
		}
		guidance(fmt.Sprintf("HTTP API content (no_retry %v)", noRetry), r.Content, h)
		guidance(fmt.Sprintf("HTTP API error.message (no_retry %v)", noRetry), r.Error.Message, h)
	}
	if runs.Load() != 0 {
		t.Errorf("the rejected calls ran %d times", runs.Load())
	}
}

// postJSON posts body to url with the API key and returns the status and
// the raw answer.
func postJSON(t *testing.T, url, key string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	return send(t, req, key)
}

// getJSON gets url with the API key.
func getJSON(t *testing.T, url, key string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	return send(t, req, key)
}

func send(t *testing.T, req *http.Request, key string) (int, []byte) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}
