package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// promptly bounds a normal call made right after bad input: generous, so
// it fails only when the bad input held something up (a retry loop, a
// blocked worker slot), never for a slow machine.
const promptly = 5 * time.Second

// normalCallWorks makes an ordinary call and fails the test unless it is
// answered correctly within promptly.
func (e *env) normalCallWorks(after string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), promptly)
	defer cancel()
	if r, err := e.d.Call(ctx, "greet", greetArgs{Name: "ada"}); err != nil || r.IsError || r.Content != "hello ada" {
		e.t.Errorf("normal call right after %s = %+v, %v", after, r, err)
	}
}

// lastSeqs returns the last sequence of the calls and approvals streams:
// zero means nothing was ever published on a tool's or a gate's subject.
func (e *env) lastSeqs() (calls, approvals uint64) {
	e.t.Helper()
	js := e.JetStream()
	last := func(name string) uint64 {
		s, err := js.Stream(e.t.Context(), name)
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := s.Info(e.t.Context())
		if err != nil {
			e.t.Fatal(err)
		}
		return info.State.LastSeq
	}
	return last(layout.CallsStream), last(layout.ApprovalsStream)
}

// nested returns n levels of JSON arrays, [[[…]]].
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestHostileArgumentsAreRefusedBeforePublishing sends arguments that are
// too deep, too large or of the wrong JSON type. Each is refused with
// invalid_arguments or payload_too_large, naming the field and the rule,
// nothing reaches the calls stream, and a normal call right after is
// answered.
func TestHostileArgumentsAreRefusedBeforePublishing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	d := e.Dispatcher(dispatcher.Config{PayloadLimit: 1 << 20})
	fleettest.WaitCatalog(t, d, "greet")
	huge := strings.Repeat("x", 2<<20) // over the dispatcher's limit for arguments
	tests := []struct {
		name     string
		args     any
		wantCode windlass.ErrorCode
		wantText []string
	}{
		{name: "10k levels deep", args: `{"name":` + nested(10_000) + `}`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "json"`, "not valid JSON"}},
		{name: "1M levels deep", args: json.RawMessage(nested(1_000_000)), wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "json"`}},
		{name: "deep but within the decoder's limit", args: `{"name":` + nested(9_000) + `}`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$.name", `rule "type"`}},
		{name: "huge valid string", args: map[string]string{"name": huge}, wantCode: windlass.CodePayloadTooLarge, wantText: []string{"over the fleet's limit of 1048576 bytes", "nothing was stored"}},
		{name: "huge wrong type", args: []byte(`{"name":["` + huge + `"]}`), wantCode: windlass.CodeInvalidArguments, wantText: []string{"$.name", `rule "type"`}},
		{name: "huge number", args: `{"name":1e1000000000}`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$.name", `rule "number"`}},
		{name: "number for a string", args: `{"name":7}`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$.name", `rule "type"`, "want string"}},
		{name: "null for a string", args: `{"name":null}`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$.name", `rule "type"`}},
		{name: "array for the object", args: []int{1, 2}, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "type"`, "must be a JSON object"}},
		{name: "string for the object", args: `"ada"`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "type"`}},
		{name: "number for the object", args: 42, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "type"`}},
		{name: "not JSON", args: `name=ada`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "json"`}},
		{name: "two objects", args: `{"name":"a"}{"name":"b"}`, wantCode: windlass.CodeInvalidArguments, wantText: []string{"$", `rule "json"`}},
		{name: "unencodable Go value", args: map[string]float64{"name": math.NaN()}, wantCode: windlass.CodeInvalidArguments, wantText: []string{"arguments", "NaN"}},
	}
	for _, tt := range tests {
		r, err := d.Call(t.Context(), "greet", tt.args)
		if err != nil || r.Code() != tt.wantCode {
			t.Errorf("%s: Call = code %q (%.200s), %v; want %s", tt.name, r.Code(), r.Content, err, tt.wantCode)
		}
		for _, text := range tt.wantText {
			if !strings.Contains(r.Content, text) {
				t.Errorf("%s: refusal %.300q does not contain %q", tt.name, r.Content, text)
			}
		}
		_, err = d.Submit(t.Context(), "greet", tt.args)
		if ce := (*windlass.CallError)(nil); !errors.As(err, &ce) || ce.Code != tt.wantCode {
			t.Errorf("%s: Submit = %v, want a %s refusal", tt.name, err, tt.wantCode)
		}
	}
	if calls, approvals := e.lastSeqs(); calls != 0 || approvals != 0 {
		t.Errorf("refused calls were published: calls stream at %d, approvals stream at %d", calls, approvals)
	}
	e.normalCallWorks("hostile arguments")
}

// TestNormalCallsAreNotDelayedByHostileOnes runs normal calls while
// another goroutine keeps sending the costliest refusals (a million levels
// of nesting, arguments over the max payload): every normal call is
// answered.
func TestNormalCallsAreNotDelayedByHostileOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	deep := json.RawMessage(nested(1_000_000))
	huge := map[string]string{"name": strings.Repeat("x", 2<<20)}
	ctx, cancel := context.WithCancel(t.Context())
	var hostile atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = e.d.Call(ctx, "greet", deep)
			_, _ = e.d.Call(ctx, "greet", huge)
			hostile.Add(1)
		}
	}()
	// At least 20 normal calls, and on until a few hostile rounds are done.
	for i := 0; i < 20 || hostile.Load() < 3; i++ {
		e.normalCallWorks("concurrent hostile calls")
	}
	cancel()
	<-done
}

// TestBadToolNamesAreRefused gives the dispatcher names with subject
// syntax (dots, wildcards), spaces, control or non-ASCII characters: each is
// refused by the name rule, without touching the queue, and nothing is
// published.
func TestBadToolNamesAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	names := []string{
		"greet.x", "greet.>", "*", ">", "windlass.call.greet", "greet *", "gr eet", " greet", "greet\n", "greet\r\nPUB windlass.call.greet 2",
		"grüß", "挨拶", "greet\x00", "greet\xff", "", strings.Repeat("g", 65),
	}
	refusedByRule := func(code windlass.ErrorCode, msg string) bool {
		return (code == windlass.CodeInvalidCall || code == windlass.CodeUnknownTool) &&
			(strings.Contains(msg, windlass.NamePattern) || strings.Contains(msg, "must match"))
	}
	for _, name := range names {
		r, err := e.d.Call(t.Context(), name, greetArgs{Name: "ada"})
		if err != nil || !refusedByRule(r.Code(), r.Content) {
			t.Errorf("Call(%q) = code %q %q, %v; want a refusal naming the rule %s", name, r.Code(), r.Content, err, windlass.NamePattern)
		}
		_, err = e.d.Submit(t.Context(), name, greetArgs{Name: "ada"}, dispatcher.AllowNoWorker())
		if ce := (*windlass.CallError)(nil); !errors.As(err, &ce) || !refusedByRule(ce.Code, ce.Message) {
			t.Errorf("Submit(%q) = %v; want a refusal naming the rule %s", name, err, windlass.NamePattern)
		}
		if _, err := e.d.Tool(name); err == nil {
			t.Errorf("Tool(%q) succeeded", name)
		}
	}
	if calls, approvals := e.lastSeqs(); calls != 0 || approvals != 0 {
		t.Errorf("calls with bad names were published: calls stream at %d, approvals stream at %d", calls, approvals)
	}
	e.normalCallWorks("bad names")
}

// TestDeadlinePastTheYear9999IsRefusedByName: a deadline the protocol
// cannot encode is invalid_call naming the deadline, not an
// invalid_arguments "encode call" error about the arguments.
func TestDeadlinePastTheYear9999IsRefusedByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, greet())
	_, err := e.d.Submit(t.Context(), "greet", greetArgs{Name: "ada"}, dispatcher.WithDeadline(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)))
	var ce *windlass.CallError
	if !errors.As(err, &ce) || ce.Code != windlass.CodeInvalidCall || !strings.HasPrefix(ce.Message, "deadline: ") || !strings.Contains(ce.Message, "year 10000") {
		t.Errorf("Submit with a deadline in the year 10000 = %v; want invalid_call naming the deadline and the rule", err)
	}
	if calls, _ := e.lastSeqs(); calls != 0 {
		t.Errorf("the call was published")
	}
}
