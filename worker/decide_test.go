package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

// Every error code of the protocol, for decide's table.
var allCodes = []windlass.ErrorCode{
	windlass.CodeInvalidArguments, windlass.CodeUnknownTool, windlass.CodeNoWorker, windlass.CodeTimeout,
	windlass.CodeToolError, windlass.CodePanic, windlass.CodeCanceled, windlass.CodeRejected, windlass.CodeExpired,
	windlass.CodeWorkerLost, windlass.CodeSpecMismatch, windlass.CodeInvalidCall, windlass.CodePayloadTooLarge,
	windlass.CodeUnavailable, windlass.CodeResultTooLarge, windlass.CodeIDConflict, windlass.CodePayloadUnreadable,
}

// decideCase is one row of decide's table and what must come of it.
type decideCase struct {
	name     string
	call     windlass.ToolCall
	result   windlass.ToolResult
	cause    error
	policy   policy
	want     verb
	answers  bool
	dead     bool
	count    counter
	minDelay time.Duration // of a retry, within jitter
}

func TestDecideTable(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	defaults := RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}
	noRetries := RetryPolicy{MaxAttempts: 1, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}
	retryTimeouts := defaults
	retryTimeouts.RetryTimeouts = true
	policies := map[string]RetryPolicy{"default": defaults, "no retries": noRetries, "retry timeouts": retryTimeouts}

	var cases []decideCase
	for pname, rp := range policies {
		p := policy{retry: rp, maxDeliver: 5, now: now}
		for attempt := 1; attempt <= 5; attempt++ {
			call := windlass.ToolCall{ID: "call_x", Name: "echo", Attempt: attempt}
			cases = append(cases, decideCase{name: fmt.Sprintf("%s/attempt %d/success", pname, attempt),
				call: call, result: windlass.ToolResult{CallID: call.ID, Name: call.Name, Content: "ok"}, policy: p, want: verbAck, answers: true})
			for _, code := range allCodes {
				for _, retryable := range []bool{false, true} {
					r := windlass.ErrorResult(call, code, "failed")
					r.Error.Retryable = retryable
					c := decideCase{name: fmt.Sprintf("%s/attempt %d/%s/retryable %v", pname, attempt, code, retryable),
						call: call, result: r, policy: p, want: verbAck, answers: true}
					retries := retryable || rp.RetryTimeouts && code == windlass.CodeTimeout
					switch {
					case code == windlass.CodeInvalidArguments:
						c.want = verbTerm // the same arguments fail the same way
					case retries && attempt < rp.MaxAttempts:
						c.want, c.answers, c.count, c.minDelay = verbRetry, false, countRetried, rp.InitialBackoff<<(attempt-1)*8/10
					case retryable && rp.MaxAttempts > 1:
						c.dead = true // its retries ran out
					}
					cases = append(cases, c)
				}
			}
		}
	}
	p := policy{retry: defaults, maxDeliver: 5, now: now}
	call := windlass.ToolCall{ID: "call_x", Name: "echo", Attempt: 1}
	retryable := windlass.ErrorResult(call, windlass.CodeUnavailable, "down")
	retryable.Error.Retryable = true
	asked := retryable
	asked.Error = &windlass.CallError{Code: windlass.CodeUnavailable, Message: "down", Retryable: true, RetryAfterMS: 10_000}
	soon := call
	soon.Deadline = now.Add(500 * time.Millisecond)
	timedOut := windlass.ErrorResult(call, windlass.CodeTimeout, "the call's deadline")
	late := call
	late.Deadline = now.Add(-time.Second)
	canceled := windlass.ErrorResult(call, windlass.CodeCanceled, "canceled")
	lastDelivery := call
	lastDelivery.Attempt = 2
	cases = append(cases,
		decideCase{name: "shutdown interrupts a failing call: handed back unanswered", call: call, result: canceled, cause: errShutdown, policy: p,
			want: verbRequeue, count: countRequeued},
		decideCase{name: "shutdown after the tool's own error: answered", call: call, result: windlass.ErrorResult(call, windlass.CodeToolError, "no such account"), cause: errShutdown, policy: p,
			want: verbAck, answers: true},
		decideCase{name: "shutdown after the tool timed out: answered", call: call, result: timedOut, cause: errShutdown, policy: p,
			want: verbAck, answers: true},
		decideCase{name: "shutdown after a retryable error of the tool's: retried as any", call: call, result: retryable, cause: errShutdown, policy: p,
			want: verbRetry, count: countRetried},
		decideCase{name: "shutdown after a success: answered", call: call, result: windlass.ToolResult{CallID: call.ID, Name: call.Name, Content: "ok"}, cause: errShutdown, policy: p,
			want: verbAck, answers: true},
		decideCase{name: "a cancellation answered canceled is counted", call: call, result: canceled, cause: windlass.ErrCallCanceled, policy: p,
			want: verbAck, answers: true, count: countCanceled},
		decideCase{name: "a retry waits as long as the tool asked", call: call, result: asked, policy: p,
			want: verbRetry, count: countRetried, minDelay: 10 * time.Second},
		decideCase{name: "no retry that cannot start before the deadline", call: soon, result: retryable, policy: p,
			want: verbAck, answers: true, dead: true},
		decideCase{name: "a timeout past the call's deadline is not retried even when timeouts are", call: late, result: timedOut,
			policy: policy{retry: retryTimeouts, maxDeliver: 5, now: now}, want: verbAck, answers: true},
		decideCase{name: "deliveries bound retries below the policy's attempts", call: lastDelivery, result: retryable,
			policy: policy{retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute}, maxDeliver: 2, now: now},
			want:   verbAck, answers: true, dead: true},
	)

	for _, tc := range cases {
		o := decide(tc.call, tc.result, tc.cause, tc.policy)
		if o.verb != tc.want || o.answers != tc.answers || (o.dead != nil) != tc.dead || o.count != tc.count {
			t.Errorf("%s: decide = verb %d answers %v dead %v count %d; want verb %d answers %v dead %v count %d",
				tc.name, o.verb, o.answers, o.dead != nil, o.count, tc.want, tc.answers, tc.dead, tc.count)
			continue
		}
		if o.answers && (o.answer.CallID != tc.result.CallID || o.answer.Code() != tc.result.Code()) {
			t.Errorf("%s: answer %+v, want the tool's result", tc.name, o.answer)
		}
		if o.dead != nil && o.deliveries != tc.call.Attempt {
			t.Errorf("%s: dead after %d deliveries, want %d", tc.name, o.deliveries, tc.call.Attempt)
		}
		if o.verb == verbRetry {
			if o.delay < tc.minDelay || o.retrying == nil || o.retrying.Kind != windlass.EventRetrying || !o.retrying.RetryAt.Equal(tc.policy.now.Add(o.delay)) {
				t.Errorf("%s: retry after %s (want ≥ %s), event %+v", tc.name, o.delay, tc.minDelay, o.retrying)
			}
		}
	}
	t.Logf("%d rows", len(cases))
}
