package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/worker"
)

// refundBench is a bench whose worker serves refund, gated when
// args.amount > 100.0, and trusts signer's releases.
type refundBench struct {
	*bench
	signer *release.Signer
	tool   windlass.Tool
	runs   atomic.Int64
	w      *worker.Worker
}

func newRefundBench(t *testing.T) *refundBench {
	t.Helper()
	r := &refundBench{bench: newBench(t), signer: newSigner(t)}
	r.tool = windlass.MustFunc("refund", func(ctx context.Context, in struct {
		Amount float64 `json:"amount"`
	}) (string, error) {
		r.runs.Add(1)
		return fmt.Sprintf("refunded %.2f", in.Amount), nil
	}, windlass.WithApprovalCondition(`args.amount > 100.0`))
	pub, err := release.ParsePublicKey(r.signer.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	r.w, _ = r.start(worker.Config{Releases: release.NewVerifier(pub), Logger: slog.New(slog.DiscardHandler)}, r.tool)
	return r
}

// publish publishes a call message on refund's call subject, with a
// release header unless hdr is "", and returns its stream sequence.
func (r *refundBench) publish(body []byte, hdr string) uint64 {
	r.t.Helper()
	id := callIDOf(r.t, body)
	m := &nats.Msg{Subject: layout.CallSubject("refund", id), Data: body, Header: nats.Header{layout.HeaderOrigin: []string{origin}}}
	if hdr != "" {
		m.Header.Set(release.Header, hdr)
	}
	ack, err := r.js.PublishMsg(r.t.Context(), m)
	if err != nil {
		r.t.Fatal(err)
	}
	return ack.Sequence
}

func callIDOf(t *testing.T, body []byte) string {
	t.Helper()
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &c); err != nil || c.ID == "" {
		t.Fatalf("no id in %s", body)
	}
	return c.ID
}

// release signs refund's release of callID with args, as the approval
// service does.
func (r *refundBench) release(callID string, args json.RawMessage) string {
	r.t.Helper()
	hash, err := release.ArgumentsHash(args)
	if err != nil {
		r.t.Fatal(err)
	}
	hdr, err := r.signer.Sign(release.Release{CallID: callID, Tool: "refund", SpecHash: r.tool.Spec().Hash(), ArgsHash: hash,
		ExpiresAt: time.Now().Add(time.Minute), ApprovedBy: []string{"alice"}, Origin: origin})
	if err != nil {
		r.t.Fatal(err)
	}
	return hdr
}

// byReference stores args in the payloads bucket and returns the body of
// a call that carries them by reference.
func (r *refundBench) byReference(id string, args json.RawMessage) []byte {
	r.t.Helper()
	obs, err := layout.EnsurePayloads(r.t.Context(), r.js, layout.StreamOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	ref, err := payload.New(obs, r.js.Conn()).Put(r.t.Context(), "args", id, args)
	if err != nil {
		r.t.Fatal(err)
	}
	body, err := json.Marshal(windlass.ToolCall{ID: id, Name: "refund", Arguments: json.RawMessage(windlass.ArgumentsByReference), ArgumentsRef: &ref})
	if err != nil {
		r.t.Fatal(err)
	}
	return body
}

// TestWorkerEnforcesTheApprovalCondition: on the subject of a tool gated
// by a condition, a message without a release runs only when its
// arguments (inline or by reference) are below the condition and its id
// is not a call held for approval; every other one is dropped, never run
// or answered, and recorded as a refusal. A released call runs whatever
// its (reviewer-edited) arguments, above the condition or below it.
func TestWorkerEnforcesTheApprovalCondition(t *testing.T) {
	t.Parallel()
	r := newRefundBench(t)
	small, large := json.RawMessage(`{"amount":20}`), json.RawMessage(`{"amount":500}`)

	// A call held for approval has a queued event (its dispatcher's).
	ev, _ := json.Marshal(windlass.Event{CallID: "held", Kind: windlass.EventQueued, Tool: "refund", Time: time.Now()})
	if _, err := r.js.Publish(t.Context(), layout.EventSubject("held", string(windlass.EventQueued)), ev); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name   string
		body   []byte
		reason release.Reason
	}{
		{"above the condition", callBody(t, "a1", "refund", large), release.ReasonNoRelease},
		{"above the condition, by reference", r.byReference("a2", large), release.ReasonNoRelease},
		{"no answer on the arguments (fail closed)", callBody(t, "a3", "refund", json.RawMessage(`{"amount":"lots"}`)), release.ReasonNoRelease},
		{"a field missing (fail closed)", callBody(t, "a4", "refund", json.RawMessage(`{}`)), release.ReasonNoRelease},
		{"below, under a held call's id", callBody(t, "held", "refund", small), release.ReasonNoRelease},
		{"another tool's name", callBody(t, "a5", "echo", small), release.ReasonOtherCall},
		{"malformed", []byte(`{"id":"a6","name":"refund","arguments":[1]}`), release.ReasonMalformed},
	}
	for _, f := range refused {
		seq := r.publish(f.body, "")
		if rec := r.refusal(seq); rec.Reason != string(f.reason) || rec.Tool != "refund" {
			t.Errorf("%s: refusal %+v, want %s", f.name, rec, f.reason)
		}
		r.noAnswerYet(f.name)
	}
	if n := r.runs.Load(); n != 0 {
		t.Fatalf("refused messages ran the tool %d times", n)
	}

	ran := []struct {
		name, want string
		body       []byte
		hdr        string
	}{
		{"below the condition", "refunded 20.00", callBody(t, "b1", "refund", small), ""},
		{"below the condition, by reference", "refunded 20.00", r.byReference("b2", small), ""},
		{"above, released", "refunded 500.00", callBody(t, "b3", "refund", large), r.release("b3", large)},
		{"released with arguments edited below", "refunded 20.00", callBody(t, "b4", "refund", small), r.release("b4", small)},
	}
	for i, c := range ran {
		r.publish(c.body, c.hdr)
		if got := r.result(10 * time.Second); got.IsError || got.Content != c.want || got.CallID != callIDOf(t, c.body) {
			t.Errorf("%s: %+v, want %q", c.name, got, c.want)
		}
		if n := r.runs.Load(); n != int64(i+1) {
			t.Errorf("%s: runs %d, want %d", c.name, n, i+1)
		}
	}
	if st := r.w.Stats(); st.Refused != int64(len(refused)) {
		t.Errorf("Stats().Refused = %d, want %d", st.Refused, len(refused))
	}
	r.callsStreamEmpties()
}

// specTool is a tool of a given spec that does nothing.
type specTool windlass.Spec

func (s specTool) Spec() windlass.Spec { return windlass.Spec(s) }
func (specTool) Call(context.Context, json.RawMessage) (any, error) {
	return nil, nil
}

// TestRegisterRefusesAnInvalidApprovalCondition: a worker does not take a
// tool whose condition does not compile, and says where and why.
func TestRegisterRefusesAnInvalidApprovalCondition(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	w, err := worker.New(worker.Config{JetStream: b.js})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Register(specTool{Name: "refund", ApprovalCondition: "args.amount > 100.0 &&\n  args.to.startsWith(1)"})
	var ce *windlass.ConditionError
	if !errors.As(err, &ce) || ce.Line != 2 || ce.Column != 21 || !strings.Contains(ce.Reason, "no matching overload") {
		t.Errorf("Register = %v, want a *ConditionError at 2:21", err)
	}
}
