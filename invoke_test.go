package windlass_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

// fnTool builds a RawTool around fn with the given timeout.
func fnTool(t *testing.T, timeout time.Duration, fn windlass.CallFunc) windlass.Tool {
	t.Helper()
	tool, err := windlass.NewTool(windlass.Spec{Name: "subject", Timeout: timeout}, fn)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestInvokeOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		timeout  time.Duration
		fn       windlass.CallFunc
		ctx      func(context.Context) context.Context
		wantCode windlass.ErrorCode
		wantText string
	}{
		{
			name:     "success",
			fn:       func(context.Context, json.RawMessage) (any, error) { return map[string]int{"n": 1}, nil },
			wantText: `{"n":1}`,
		},
		{
			name:     "plain error",
			fn:       func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("disk full") },
			wantCode: windlass.CodeToolError, wantText: "Error: disk full",
		},
		{
			name: "typed error keeps its type name",
			fn: func(context.Context, json.RawMessage) (any, error) {
				return nil, &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
			},
			wantCode: windlass.CodeToolError, wantText: "PathError: open /x: file does not exist",
		},
		{
			name:    "timeout honoured by the tool",
			timeout: 50 * time.Millisecond,
			fn: func(ctx context.Context, _ json.RawMessage) (any, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			wantCode: windlass.CodeTimeout, wantText: `Tool "subject" timed out after 50ms.`,
		},
		{
			name:     "panic",
			fn:       func(context.Context, json.RawMessage) (any, error) { panic("boom") },
			wantCode: windlass.CodePanic, wantText: `Tool "subject" panicked: boom`,
		},
		{
			name: "canceled context",
			fn: func(ctx context.Context, _ json.RawMessage) (any, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			ctx: func(ctx context.Context) context.Context {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx
			},
			wantCode: windlass.CodeCanceled, wantText: `Tool "subject" was canceled.`,
		},
		{
			name: "call error chooses the code",
			fn: func(context.Context, json.RawMessage) (any, error) {
				return nil, &windlass.CallError{Code: windlass.CodeNoWorker, Message: "nobody home"}
			},
			wantCode: windlass.CodeNoWorker, wantText: "nobody home",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}
			res := windlass.Invoke(ctx, fnTool(t, tt.timeout, tt.fn), windlass.ToolCall{ID: "c1", Name: "subject"})
			if res.CallID != "c1" || res.Name != "subject" || res.Attempt != 1 {
				t.Errorf("envelope = %+v", res)
			}
			if res.IsError != (tt.wantCode != "") || res.Code() != tt.wantCode {
				t.Fatalf("result = %+v, want code %q", res, tt.wantCode)
			}
			if res.Content != tt.wantText {
				t.Errorf("content = %q, want %q", res.Content, tt.wantText)
			}
			if res.IsError && (res.Error.Message != res.Content || res.Data != nil) {
				t.Errorf("error result = %+v: message must equal content and data be empty", res)
			}
			if res.DurationMS < 0 || (tt.timeout > 0 && res.DurationMS < float64(tt.timeout.Milliseconds())) {
				t.Errorf("duration_ms = %v", res.DurationMS)
			}
		})
	}
}

func TestInvokeHungToolFailsOnTime(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // let the abandoned goroutine end before goleak looks
	tool := fnTool(t, 30*time.Millisecond, func(context.Context, json.RawMessage) (any, error) {
		<-release // ignores its context entirely
		return "too late", nil
	})
	start := time.Now()
	res := windlass.Invoke(t.Context(), tool, windlass.ToolCall{ID: "hung"})
	if res.Code() != windlass.CodeTimeout {
		t.Fatalf("result = %+v, want timeout", res)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Invoke took %s for a 30ms timeout", el)
	}
}

func TestInvokeAsyncAnswersOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		timeout  time.Duration
		wantCode windlass.ErrorCode
	}{
		{name: "the tool returns", timeout: time.Hour},
		{name: "the timeout passes first, the tool returns late", timeout: 30 * time.Millisecond, wantCode: windlass.CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release, returned := make(chan struct{}), make(chan struct{})
			tool := fnTool(t, tt.timeout, func(context.Context, json.RawMessage) (any, error) {
				defer close(returned)
				<-release // ignores its context
				return "done", nil
			})
			results := make(chan windlass.ToolResult, 2)
			windlass.InvokeAsync(t.Context(), tool, windlass.ToolCall{ID: "a"}, func(r windlass.ToolResult) { results <- r })
			// InvokeAsync has returned while the tool still waits.
			if tt.wantCode == "" {
				close(release)
			}
			r := <-results
			if r.Code() != tt.wantCode || r.CallID != "a" || r.Attempt != 1 || (tt.wantCode == "" && r.Content != "done") {
				t.Fatalf("result = %+v, want code %q", r, tt.wantCode)
			}
			if tt.wantCode != "" {
				close(release)
			}
			<-returned
			select {
			case again := <-results:
				t.Errorf("a second answer: %+v", again)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

// panicDecoder panics when it is decoded.
type panicDecoder struct{}

func (*panicDecoder) UnmarshalJSON([]byte) error { panic("bad decoder") }

func TestInvokeAsyncAnswersBadArgumentsAtOnce(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{}, 2)
	type in struct {
		N int          `json:"n"`
		P panicDecoder `json:"p,omitzero"`
	}
	tool := windlass.MustFunc("decoding", func(context.Context, in) (int, error) { ran <- struct{}{}; return 1, nil })
	tests := []struct {
		name     string
		args     string
		wantCode windlass.ErrorCode
		wantText string
	}{
		{name: "invalid", args: `{"n":"one"}`, wantCode: windlass.CodeInvalidArguments},
		{name: "the decoder panics", args: `{"n":1,"p":{}}`, wantCode: windlass.CodePanic, wantText: `Tool "decoding" panicked: bad decoder`},
	}
	for _, tt := range tests {
		results := make(chan windlass.ToolResult, 1)
		windlass.InvokeAsync(t.Context(), tool, windlass.ToolCall{ID: "b", Arguments: json.RawMessage(tt.args)}, func(r windlass.ToolResult) { results <- r })
		select {
		case r := <-results:
			if r.Code() != tt.wantCode || tt.wantText != "" && r.Content != tt.wantText {
				t.Errorf("%s: result = %+v, want code %q", tt.name, r, tt.wantCode)
			}
		default:
			t.Errorf("%s: not answered before InvokeAsync returned", tt.name)
		}
	}
	if len(ran) != 0 {
		t.Error("the function ran")
	}
}

func TestInvokeCallDeadlineBeatsTimeout(t *testing.T) {
	t.Parallel()
	seenc := make(chan time.Time, 2)
	tool := fnTool(t, time.Hour, func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, _ := ctx.Deadline()
		seenc <- d
		<-ctx.Done()
		return nil, ctx.Err()
	})
	deadline := time.Now().Add(40 * time.Millisecond)
	res := windlass.Invoke(t.Context(), tool, windlass.ToolCall{ID: "d", Deadline: deadline})
	if res.Code() != windlass.CodeTimeout || !strings.Contains(res.Content, "deadline") {
		t.Fatalf("result = %+v", res)
	}
	if seen := <-seenc; seen.After(deadline.Add(time.Millisecond)) {
		t.Errorf("tool's ctx deadline %v is later than the call's %v", seen, deadline)
	}
	past := windlass.Invoke(t.Context(), tool, windlass.ToolCall{ID: "p", Deadline: time.Now().Add(-time.Second)})
	if past.Code() != windlass.CodeTimeout {
		t.Errorf("past deadline: %+v", past)
	}
}

func TestInvokeCallInfoInContext(t *testing.T) {
	t.Parallel()
	var got windlass.CallInfo
	tool := fnTool(t, 0, func(ctx context.Context, _ json.RawMessage) (any, error) {
		got, _ = windlass.CallInfoFromContext(ctx)
		return nil, nil
	})
	deadline := time.Now().Add(time.Minute)
	res := windlass.Invoke(t.Context(), tool, windlass.ToolCall{ID: "idem-1", Attempt: 3, Deadline: deadline, Metadata: map[string]string{"user": "u1"}})
	if res.IsError || res.Content != "null" || string(res.Data) != "null" {
		t.Fatalf("result = %+v", res)
	}
	if got.ID != "idem-1" || got.Attempt != 3 || !got.Deadline.Equal(deadline) || got.Name != "subject" || got.Metadata["user"] != "u1" {
		t.Errorf("CallInfo = %+v", got)
	}
	if _, ok := windlass.CallInfoFromContext(t.Context()); ok {
		t.Error("CallInfo found in a plain context")
	}
}

func TestRunReturnsExecutionError(t *testing.T) {
	t.Parallel()
	cause := errors.New("nope")
	tool := fnTool(t, 0, func(context.Context, json.RawMessage) (any, error) { return nil, cause })
	res, err := windlass.Run(t.Context(), tool, map[string]any{})
	var ee *windlass.ExecutionError
	if !errors.As(err, &ee) || ee.Tool != "subject" || ee.Code != windlass.CodeToolError || !res.IsError {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if !errors.Is(err, cause) || ee.Err != cause {
		t.Errorf("Run's error %v does not wrap the tool's own error (Err = %v)", err, ee.Err)
	}
	// No error of the tool's own: a timeout it did not report, a panic.
	// The tool returns only once the test ends, long after its timeout
	// answered the call (returning at its context's end would race it).
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := fnTool(t, 10*time.Millisecond, func(context.Context, json.RawMessage) (any, error) { <-release; return nil, nil })
	if _, err := windlass.Run(t.Context(), slow, map[string]any{}); !errors.As(err, &ee) || ee.Code != windlass.CodeTimeout || ee.Err != nil {
		t.Errorf("a timeout: %v (Err %v), want timeout with no tool error", err, ee.Err)
	}
	panics := fnTool(t, 0, func(context.Context, json.RawMessage) (any, error) { panic("boom") })
	if _, err := windlass.Run(t.Context(), panics, map[string]any{}); !errors.As(err, &ee) || ee.Err != nil {
		t.Errorf("a panic: %v (Err %v), want no tool error", err, ee.Err)
	}
	if _, err := windlass.Run(t.Context(), tool, make(chan int)); err == nil || !strings.Contains(err.Error(), "encode arguments") {
		t.Errorf("unencodable args: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	d := windlass.Describe(fnTool(t, 0, func(context.Context, json.RawMessage) (any, error) { return nil, nil }))
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"subject","description":"","parameters":{"properties":{},"type":"object"},"requires_approval":false,"timeout_seconds":30,"spec_hash":"` + d.SpecHash + `"}`
	if string(b) != want || d.SpecHash == "" {
		t.Errorf("Describe = %s", b)
	}
}

func TestToolCallValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		call      windlass.ToolCall
		wantField string
	}{
		{name: "ok", call: windlass.ToolCall{ID: "toolu_01A", Name: "x", Arguments: []byte(`{"a":1}`)}},
		{name: "null arguments mean none", call: windlass.ToolCall{ID: "a", Name: "x", Arguments: []byte(`null`)}},
		{name: "no id", call: windlass.ToolCall{Name: "x"}, wantField: "id"},
		{name: "id with space", call: windlass.ToolCall{ID: "a b", Name: "x"}, wantField: "id"},
		{name: "long id", call: windlass.ToolCall{ID: strings.Repeat("a", 129), Name: "x"}, wantField: "id"},
		{name: "bad name", call: windlass.ToolCall{ID: "a", Name: "x.y"}, wantField: "name"},
		{name: "array arguments", call: windlass.ToolCall{ID: "a", Name: "x", Arguments: []byte(`[]`)}, wantField: "arguments"},
		{name: "broken arguments", call: windlass.ToolCall{ID: "a", Name: "x", Arguments: []byte(`{`)}, wantField: "arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call.Validate()
			if (err != nil) != (tt.wantField != "") || (err != nil && !strings.Contains(err.Error(), tt.wantField)) {
				t.Errorf("Validate() = %v, want error naming %q", err, tt.wantField)
			}
		})
	}
	if a, b := windlass.NewCallID(), windlass.NewCallID(); a == b || windlass.ValidateCallID(a) != nil {
		t.Errorf("NewCallID gave %q and %q", a, b)
	}
	// "call_" and 26 base32 characters, each of the 32 turning up.
	form := regexp.MustCompile(`^call_[A-Z2-7]{26}$`)
	seen := map[rune]bool{}
	for range 200 {
		id := windlass.NewCallID()
		if !form.MatchString(id) {
			t.Fatalf("NewCallID = %q, want the form %s", id, form)
		}
		for _, c := range id[len("call_"):] {
			seen[c] = true
		}
	}
	if len(seen) != 32 {
		t.Errorf("200 call ids used %d of the 32 base32 characters", len(seen))
	}
}

func TestWireJSON(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	call := windlass.ToolCall{ID: "c1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`), Deadline: deadline, Attempt: 1}
	b, _ := json.Marshal(call)
	if string(b) != `{"id":"c1","name":"add","arguments":{"a":1,"b":2},"deadline":"2026-12-02T10:00:00.123456789Z","attempt":1}` {
		t.Errorf("ToolCall JSON = %s", b)
	}
	res := windlass.ToolResult{CallID: "c1", Name: "add", Content: "3", Data: json.RawMessage("3"), DurationMS: 0.5, Worker: "w1", Attempt: 1}
	b, _ = json.Marshal(res)
	if string(b) != `{"call_id":"c1","name":"add","content":"3","data":3,"is_error":false,"duration_ms":0.5,"worker":"w1","attempt":1}` {
		t.Errorf("ToolResult JSON = %s", b)
	}
	var n int
	if err := res.Decode(&n); err != nil || n != 3 {
		t.Errorf("Decode = %d, %v", n, err)
	}
	failed := windlass.ErrorResult(call, windlass.CodeTimeout, "late")
	b, _ = json.Marshal(failed)
	if string(b) != `{"call_id":"c1","name":"add","content":"late","is_error":true,"error":{"code":"timeout","message":"late"},"duration_ms":0,"attempt":1}` {
		t.Errorf("error ToolResult JSON = %s", b)
	}
	if !errors.Is(failed.Error, &windlass.CallError{Code: windlass.CodeTimeout}) {
		t.Error("errors.Is by code failed")
	}
}
