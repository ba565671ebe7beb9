package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestCalls drives calls through the API: sync, a wait bound that passes,
// async, an own id, cancel.
func TestCalls(t *testing.T) {
	f := newFleet(t, httpapi.Config{})

	t.Run("SyncResult", func(t *testing.T) {
		c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2}}`), http.StatusOK)
		if c.State != dispatcher.StateFinished || c.Result == nil || c.Result.Content != "3" || c.Result.IsError {
			t.Fatalf("call = %+v, want finished with content 3", c)
		}
		if c.ID == "" || c.URL != "/v1/calls/"+c.ID || c.Tool != "add" {
			t.Errorf("id %q, url %q, tool %q", c.ID, c.URL, c.Tool)
		}
	})

	t.Run("ToolErrorIs200", func(t *testing.T) {
		c := f.call(f.do("POST", "/v1/calls", `{"tool":"fail","arguments":{"why":"no disk"}}`), http.StatusOK)
		if c.Result == nil || !c.Result.IsError || c.Result.Code() != windlass.CodeToolError || !strings.Contains(c.Result.Content, "no disk") {
			t.Fatalf("call = %+v, want a tool_error result quoting the reason", c.Result)
		}
	})

	t.Run("WaitBoundPassesThenPoll", func(t *testing.T) {
		start := time.Now()
		r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":3000},"wait_ms":100}`)
		c := f.call(r, http.StatusAccepted)
		if loc := r.header.Get("Location"); loc != c.URL || c.URL != "/v1/calls/"+c.ID {
			t.Errorf("Location %q, url %q, want /v1/calls/%s", loc, c.URL, c.ID)
		}
		if c.State == dispatcher.StateFinished || c.Result != nil {
			t.Errorf("202 with a finished call: %+v", c)
		}
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Errorf("the 202 took %s, past the wait bound", took)
		}
		c = f.pollUntil(c.ID, "the slow call to finish", func(c httpapi.Call) bool { return c.State == dispatcher.StateFinished })
		if c.Result == nil || c.Result.Content != "slept 3000ms" {
			t.Fatalf("finished call = %+v", c)
		}
	})

	t.Run("TimeoutBoundsTheWait", func(t *testing.T) {
		// timeout_ms is the call's deadline: the worker answers timeout,
		// and the wait (bounded by it too) sees that answer or gives 202.
		r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":60000},"timeout_ms":300}`)
		if r.status != http.StatusOK && r.status != http.StatusAccepted {
			t.Fatalf("got %s", r)
		}
		var c httpapi.Call
		r.decode(t, &c)
		c = f.pollUntil(c.ID, "the timed-out call to finish", func(c httpapi.Call) bool { return c.State == dispatcher.StateFinished })
		if c.Result.Code() != windlass.CodeTimeout {
			t.Errorf("result = %+v, want timeout", c.Result)
		}
	})

	t.Run("LongestTimeout", func(t *testing.T) {
		// The largest timeout_ms and wait_ms are taken as asked.
		body := fmt.Sprintf(`{"tool":"add","arguments":{"a":1,"b":2},"timeout_ms":%d,"wait_ms":%[1]d}`, httpapi.MaxDurationMS)
		if c := f.call(f.do("POST", "/v1/calls", body), http.StatusOK); c.Result == nil || c.Result.Content != "3" {
			t.Fatalf("call with the longest timeout = %+v", c)
		}
		c := f.call(f.do("POST", "/v1/calls", fmt.Sprintf(`{"tool":"slow","arguments":{"ms":600000},"timeout_ms":%d,"async":true}`, httpapi.MaxDurationMS)), http.StatusAccepted)
		defer f.do("DELETE", "/v1/calls/"+c.ID, "")
		if c.Deadline.Year() < 2200 {
			t.Errorf("deadline %s; want the one asked for, about 292 years ahead", c.Deadline)
		}
	})

	t.Run("AsyncThenGet", func(t *testing.T) {
		start := time.Now()
		r := f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":3000},"async":true}`)
		c := f.call(r, http.StatusAccepted)
		if time.Since(start) > 2500*time.Millisecond {
			t.Errorf("async answered after %s", time.Since(start))
		}
		if r.header.Get("Location") != "/v1/calls/"+c.ID || c.State == dispatcher.StateFinished {
			t.Errorf("Location %q, call %+v", r.header.Get("Location"), c)
		}
		c = f.pollUntil(c.ID, "the async call to finish", func(c httpapi.Call) bool { return c.State == dispatcher.StateFinished })
		if c.Result.Content != "slept 3000ms" || c.Tool != "slow" || c.Attempt != 1 || c.Worker == "" {
			t.Errorf("finished call = %+v, result %+v", c, c.Result)
		}
	})

	t.Run("OwnIDIsIdempotent", func(t *testing.T) {
		body := `{"tool":"count","arguments":{},"id":"toolu_01-own-id","metadata":{"requester":"ada"}}`
		first := f.call(f.do("POST", "/v1/calls", body), http.StatusOK)
		again := f.call(f.do("POST", "/v1/calls", body), http.StatusOK)
		if first.ID != "toolu_01-own-id" || again.ID != first.ID {
			t.Fatalf("ids %q and %q, want toolu_01-own-id", first.ID, again.ID)
		}
		if again.Result.Content != first.Result.Content || f.runs.Load() != 1 {
			t.Errorf("results %q and %q after %d executions, want one execution", first.Result.Content, again.Result.Content, f.runs.Load())
		}
		async := f.call(f.do("POST", "/v1/calls", strings.Replace(body, `{}`, `{},"async":true`, 1)), http.StatusOK)
		if async.State != dispatcher.StateFinished || f.runs.Load() != 1 {
			t.Errorf("async resubmit: %+v after %d executions; want the finished call, run once", async, f.runs.Load())
		}
	})

	t.Run("OwnIDWithOtherArgumentsIs409", func(t *testing.T) {
		f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"id":"toolu_sum"}`), http.StatusOK)
		for _, body := range []string{
			`{"tool":"add","arguments":{"a":1,"b":20},"id":"toolu_sum"}`,
			`{"tool":"count","arguments":{},"id":"toolu_sum"}`,
		} {
			r := f.do("POST", "/v1/calls", body)
			var e httpapi.ErrorBody
			if r.status != http.StatusConflict {
				t.Errorf("%s: got %s, want 409", body, r)
				continue
			}
			r.decode(t, &e)
			if e.Error.Code != windlass.CodeIDConflict || !strings.Contains(e.Error.Message, `"toolu_sum"`) || e.Result != nil {
				t.Errorf("%s: error %+v; want id_conflict naming the id, without the other call's result", body, e)
			}
		}
		if c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"b":2, "a":1},"id":"toolu_sum"}`), http.StatusOK); c.Result == nil || c.Result.Content != "3" {
			t.Errorf("same id, same arguments reordered: %+v, want the call's result", c)
		}
	})

	t.Run("OwnIDNeedsEscaping", func(t *testing.T) {
		// An id may hold "/", "?", "#" and "%": its URL escapes them.
		c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":1},"id":"toolu/a?b#c%d"}`), http.StatusOK)
		if c.ID != "toolu/a?b#c%d" || c.URL != "/v1/calls/toolu%2Fa%3Fb%23c%25d" {
			t.Fatalf("id %q, url %q", c.ID, c.URL)
		}
		if got := f.call(f.do("GET", c.URL, ""), http.StatusOK); got.ID != c.ID || got.Result.Content != "2" {
			t.Errorf("GET %s = %+v", c.URL, got)
		}
	})

	t.Run("CancelRunning", func(t *testing.T) {
		c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true}`), http.StatusAccepted)
		f.pollUntil(c.ID, "the slow call to start", func(c httpapi.Call) bool { return c.State == dispatcher.StateRunning })
		canceled := f.call(f.do("DELETE", "/v1/calls/"+c.ID+"?reason=not+needed", ""), http.StatusOK)
		if canceled.State != dispatcher.StateFinished || canceled.Result.Code() != windlass.CodeCanceled || !strings.Contains(canceled.Result.Content, "not needed") {
			t.Fatalf("DELETE = %+v, result %+v; want finished, canceled quoting the reason", canceled, canceled.Result)
		}
		got := f.call(f.do("GET", "/v1/calls/"+c.ID, ""), http.StatusOK)
		if got.Result.Code() != windlass.CodeCanceled {
			t.Errorf("GET after cancel: %+v", got.Result)
		}

		r := f.do("DELETE", "/v1/calls/"+c.ID, "")
		var body httpapi.ErrorBody
		r.decode(t, &body)
		if r.status != http.StatusConflict || body.Error.Code != httpapi.CodeCallFinished || body.Result == nil || body.Result.Code() != windlass.CodeCanceled {
			t.Errorf("second DELETE = %s; want 409 call_finished with the canceled result", r)
		}
	})

	t.Run("CancelFinished", func(t *testing.T) {
		c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":2,"b":2}}`), http.StatusOK)
		r := f.do("DELETE", "/v1/calls/"+c.ID, "")
		var body httpapi.ErrorBody
		r.decode(t, &body)
		if r.status != http.StatusConflict || body.Error.Code != httpapi.CodeCallFinished || body.Result == nil || body.Result.Content != "4" {
			t.Errorf("DELETE of a finished call = %s; want 409 with its result", r)
		}
	})

	t.Run("UnknownCall", func(t *testing.T) {
		for _, method := range []string{"GET", "DELETE"} {
			if r := f.do(method, "/v1/calls/call_never_made", ""); r.status != http.StatusNotFound || r.errorCode() != httpapi.CodeUnknownCall {
				t.Errorf("%s unknown call = %s; want 404 unknown_call", method, r)
			}
		}
		if r := f.do("GET", "/v1/calls/call_never_made/events", ""); r.status != http.StatusNotFound || r.errorCode() != httpapi.CodeUnknownCall {
			t.Errorf("events of an unknown call = %s; want 404 unknown_call", r)
		}
	})
}

// TestSpecHashPinsCalls: GET /v1/tools lists each tool's spec hash, POST
// /v1/calls takes one as spec_hash, and a stale pin is refused 409
// spec_mismatch before it is queued, with the tool's current definition in
// the request's style and its hash.
func TestSpecHashPinsCalls(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	var list httpapi.ToolList
	f.do("GET", "/v1/tools?style=anthropic", "").decode(t, &list)
	catalog, err := f.d.Catalog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.SpecHashes) != len(catalog) || len(list.Tools) != len(catalog) {
		t.Fatalf("spec_hashes %v for %d tools listed, want one per tool of the catalog (%d)", list.SpecHashes, len(list.Tools), len(catalog))
	}
	for _, e := range catalog {
		if list.SpecHashes[e.Spec.Name] != e.Hash {
			t.Errorf("spec_hashes[%s] = %q, want %q", e.Spec.Name, list.SpecHashes[e.Spec.Name], e.Hash)
		}
	}
	current := list.SpecHashes["add"]

	c := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"spec_hash":"`+current+`"}`), http.StatusOK)
	if c.Result == nil || c.Result.Content != "3" {
		t.Errorf("call pinned to the current spec = %+v, want 3", c.Result)
	}

	stale := windlass.MustFunc("add", func(ctx context.Context, in struct{ A int }) (int, error) { return in.A, nil }).Spec().Hash()
	r := f.do("POST", "/v1/calls", `{"tool":"add","id":"stale-pin","arguments":{"a":1,"b":2},"spec_hash":"`+stale+`","style":"anthropic"}`)
	var body httpapi.ErrorBody
	r.decode(t, &body)
	if r.status != http.StatusConflict || body.Error.Code != windlass.CodeSpecMismatch || body.SpecHash != current ||
		body.Tool["name"] != "add" || body.Tool["input_schema"] == nil || !strings.Contains(body.Error.Message, current) {
		t.Errorf("stale pin = %s; want 409 spec_mismatch with the anthropic definition of add and hash %s", r, current)
	}
	if got := f.do("GET", "/v1/calls/stale-pin", ""); got.status != http.StatusNotFound || got.errorCode() != httpapi.CodeUnknownCall {
		t.Errorf("GET the refused call = %s, want 404 unknown_call: it was not queued", got)
	}
	if r := f.do("POST", "/v1/calls", `{"tool":"add","arguments":{},"spec_hash":"`+stale+`","style":"claude"}`); r.status != http.StatusBadRequest || r.errorCode() != windlass.CodeInvalidCall {
		t.Errorf("an unknown style = %s, want 400 invalid_call", r)
	}
}
