package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

// gatedBench is a bench whose worker serves the gated tool echo and trusts
// signer's releases, as a worker behind the approval service does.
type gatedBench struct {
	*bench
	signer *release.Signer
	tool   windlass.Tool
	runs   atomic.Int64
	w      *worker.Worker
	logs   *logLines
}

func newGatedBench(t *testing.T, opts ...windlass.FuncOption) *gatedBench {
	t.Helper()
	g := unstartedGatedBench(t, opts...)
	g.w, _ = g.start(g.workerConfig(), g.tool)
	return g
}

// unstartedGatedBench is newGatedBench without its worker.
func unstartedGatedBench(t *testing.T, opts ...windlass.FuncOption) *gatedBench {
	t.Helper()
	g := &gatedBench{bench: newBench(t), signer: newSigner(t), logs: &logLines{}}
	g.tool = countingEcho(&g.runs, append([]windlass.FuncOption{windlass.WithApproval()}, opts...)...)
	return g
}

// workerConfig is the config of the bench's worker: it trusts the bench's
// signer and logs to g.logs.
func (g *gatedBench) workerConfig() worker.Config {
	g.t.Helper()
	pub, err := release.ParsePublicKey(g.signer.PublicKey())
	if err != nil {
		g.t.Fatal(err)
	}
	return worker.Config{Releases: release.NewVerifier(pub), Logger: slog.New(g.logs)}
}

// logged reports whether the worker logged a line containing s.
func (g *gatedBench) logged(s string) bool { return g.logs.contains(s) }

// logLines is a slog handler that keeps the messages.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }
func (l *logLines) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func newSigner(t *testing.T) *release.Signer {
	t.Helper()
	priv, _, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := release.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return release.NewSigner(key)
}

// releaseOf signs the release of a call of echo with args, as the approval
// service does, valid for a minute.
func (g *gatedBench) releaseOf(s *release.Signer, callID string, args json.RawMessage) string {
	g.t.Helper()
	hash, err := release.ArgumentsHash(args)
	if err != nil {
		g.t.Fatal(err)
	}
	hdr, err := s.Sign(release.Release{CallID: callID, Tool: "echo", SpecHash: g.tool.Spec().Hash(), ArgsHash: hash,
		ExpiresAt: time.Now().Add(time.Minute), ApprovedBy: []string{"alice"}, Origin: origin})
	if err != nil {
		g.t.Fatal(err)
	}
	return hdr
}

// publishGated publishes a message on echo's call subject with the given
// body, release header ("" for none) and message id, and returns its
// stream sequence.
func (g *gatedBench) publishGated(body []byte, hdr, msgID string) uint64 {
	g.t.Helper()
	m := &nats.Msg{Subject: layout.CallSubject("echo", fleettest.CallIDOf(body)), Data: body, Header: nats.Header{layout.HeaderOrigin: []string{origin}}}
	if hdr != "" {
		m.Header.Set(release.Header, hdr)
	}
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	ack, err := g.js.PublishMsg(g.t.Context(), m)
	if err != nil {
		g.t.Fatal(err)
	}
	if ack.Duplicate {
		g.t.Fatalf("message %q was dropped as a duplicate", msgID)
	}
	return ack.Sequence
}

func callBody(t *testing.T, id, tool string, args json.RawMessage) []byte {
	t.Helper()
	data, err := json.Marshal(windlass.ToolCall{ID: id, Name: tool, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// refusal waits for the refusal record of the calls stream's message seq.
func (b *bench) refusal(seq uint64) windlass.Refusal {
	b.t.Helper()
	var rec windlass.Refusal
	fleettest.WaitFor(b.t, 10*time.Second, fmt.Sprintf("refusal record of message %d", seq), func() bool {
		s, err := b.js.Stream(context.Background(), layout.RefusalsStream)
		if err != nil {
			return false
		}
		for next := uint64(1); ; {
			m, err := s.GetMsg(context.Background(), next, jetstream.WithGetMsgSubject(layout.RefusalSubjects))
			if err != nil {
				return false
			}
			next = m.Sequence + 1
			if json.Unmarshal(m.Data, &rec) == nil && rec.Seq == seq {
				return true
			}
		}
	})
	return rec
}

// noAnswerYet fails if any result reached the results inbox.
func (b *bench) noAnswerYet(what string) {
	b.t.Helper()
	select {
	case r := <-b.results:
		b.t.Errorf("%s: answered %+v; a refused message must not be answered", what, r)
	default:
	}
}

// TestForgedGatedMessagesAreDroppedNotAnswered publishes, on a gated tool's
// call subject, every kind of message that is not the rightful release of
// a call — before the real release (the call is still held) and after it
// ran. None runs, none is answered under the call's id (whoever published
// it would otherwise choose what the real caller is told), each is
// recorded as a refusal with its reason, and the real call runs once with
// its true answer.
func TestForgedGatedMessagesAreDroppedNotAnswered(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t)
	args := json.RawMessage(`{"text":"pay bob"}`)
	real := g.releaseOf(g.signer, "pay-1", args)
	flipped := []byte(real)
	flipped[len(flipped)-3] ^= 1
	forgeries := []struct {
		name   string
		body   []byte
		hdr    string
		reason release.Reason
	}{
		{"no release", callBody(t, "pay-1", "echo", args), "", release.ReasonNoRelease},
		{"another call's release", callBody(t, "pay-1", "echo", args), g.releaseOf(g.signer, "pay-2", args), release.ReasonOtherCall},
		{"other arguments than approved", callBody(t, "pay-1", "echo", json.RawMessage(`{"text":"pay mallory"}`)), real, release.ReasonArgsMismatch},
		{"flipped signature", callBody(t, "pay-1", "echo", args), string(flipped), release.ReasonBadSignature},
		{"signed by an unknown key", callBody(t, "pay-1", "echo", args), g.releaseOf(newSigner(t), "pay-1", args), release.ReasonUnknownKey},
		{"another tool's name", callBody(t, "pay-1", "refund", args), real, release.ReasonOtherCall},
		{"malformed, id readable", []byte(`{"id":"pay-1","name":"echo","arguments":[1]}`), real, release.ReasonMalformed},
		{"past its deadline", []byte(`{"id":"pay-1","name":"echo","arguments":{"text":"pay bob"},"deadline":"2001-01-01T00:00:00Z"}`), "", release.ReasonNoRelease},
	}
	forge := func(when string) {
		for i, f := range forgeries {
			seq := g.publishGated(f.body, f.hdr, fmt.Sprintf("%s-%d", when, i))
			rec := g.refusal(seq)
			if rec.Reason != string(f.reason) || rec.Tool != "echo" || rec.Worker == "" || rec.Origin != origin {
				t.Errorf("%s, %s: refusal %+v, want reason %s", when, f.name, rec, f.reason)
			}
			g.noAnswerYet(when + ", " + f.name)
		}
	}

	forge("held")
	if n := g.runs.Load(); n != 0 {
		t.Fatalf("forgeries ran the gated tool %d times", n)
	}
	g.publishGated(callBody(t, "pay-1", "echo", args), real, g.signer.MessageID("pay-1"))
	if r := g.result(10 * time.Second); r.IsError || r.Content != "pay bob" || r.CallID != "pay-1" {
		t.Fatalf("the released call: %+v", r)
	}
	forge("after")
	// The exact released message, copied under another message id.
	seq := g.publishGated(callBody(t, "pay-1", "echo", args), real, "copy")
	if rec := g.refusal(seq); rec.Reason != string(release.ReasonReused) {
		t.Errorf("the copy: refusal %+v, want reused", rec)
	}
	g.noAnswerYet("the copy")
	if r, ok := g.storedResult("pay-1"); !ok || r.IsError || r.Content != "pay bob" {
		t.Errorf("the stored answer: %+v (found %v), want the real one", r, ok)
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the gated tool ran %d times, want once", n)
	}
	if st := g.w.Stats(); st.Refused != int64(2*len(forgeries)+1) {
		t.Errorf("Stats().Refused = %d, want %d", st.Refused, 2*len(forgeries)+1)
	}
	g.callsStreamEmpties()
}

// TestAReleaseOverItsToolsBoundIsRefusedUnhashed: a release signed for a
// call, on a message whose arguments hold more JSON values than the tool
// takes, is refused args_mismatch before its arguments are hashed (the
// approval service holds, and its reviewers edit, only arguments within
// the bound, so these are not the approved ones; hashing them canonically
// would sort whatever a publisher sends). It is signed here over those
// very arguments, so only the bound can refuse it: before the bound, the
// worker hashed them, found them approved and answered the call.
func TestAReleaseOverItsToolsBoundIsRefusedUnhashed(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t, windlass.WithMaxArgumentValues(3))
	over := json.RawMessage(`{"text":"pay bob","memo":"x","note":"y"}`) // 4 values
	seq := g.publishGated(callBody(t, "pay-over", "echo", over), g.releaseOf(g.signer, "pay-over", over), "over")
	rec := g.refusal(seq)
	if rec.Reason != string(release.ReasonArgsMismatch) || !strings.Contains(rec.Detail, "more than 3 JSON values") {
		t.Errorf("refusal %+v; want args_mismatch naming the bound of 3 values", rec)
	}
	g.noAnswerYet("a release over its tool's bound")
	if n := g.runs.Load(); n != 0 {
		t.Errorf("the gated tool ran %d times", n)
	}

	// Within the bound, a release signed the same way runs.
	within := json.RawMessage(`{"text":"pay bob"}`)
	g.publishGated(callBody(t, "pay-within", "echo", within), g.releaseOf(g.signer, "pay-within", within), g.signer.MessageID("pay-within"))
	if r := g.result(10 * time.Second); r.IsError || r.Content != "pay bob" || r.CallID != "pay-within" {
		t.Fatalf("the call within the bound: %+v", r)
	}
}

// TestAReleaseOfAnotherSpecIsAnsweredSpecMismatch: a call approved while
// its tool took 10 JSON values (the release signs that spec's hash), with
// 4, reaches a worker of the tool redeployed with a bound of 3. The tool
// changed: its caller is told spec_mismatch. The worker's own bound is not
// the one the arguments were approved under, so it does not refuse them
// as args_mismatch ("not the ones approved": they are) and leave the call
// unanswered. (Found by a review helper.)
func TestAReleaseOfAnotherSpecIsAnsweredSpecMismatch(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t, windlass.WithMaxArgumentValues(3))
	old := countingEcho(new(atomic.Int64), windlass.WithApproval(), windlass.WithMaxArgumentValues(10)).Spec()
	args := json.RawMessage(`{"text":"pay bob","memo":"x","note":"y"}`) // 4 values: within the old bound
	hash, err := release.ArgumentsHash(args)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := g.signer.Sign(release.Release{CallID: "pay-old-spec", Tool: "echo", SpecHash: old.Hash(), ArgsHash: hash,
		ExpiresAt: time.Now().Add(time.Minute), ApprovedBy: []string{"alice"}, Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(windlass.ToolCall{ID: "pay-old-spec", Name: "echo", Arguments: args, SpecHash: old.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	g.publishGated(body, hdr, g.signer.MessageID("pay-old-spec"))
	if r := g.result(10 * time.Second); r.Code() != windlass.CodeSpecMismatch {
		t.Errorf("answered %v %q; want spec_mismatch", r.Code(), r.Content)
	}
	if n := g.runs.Load(); n != 0 {
		t.Errorf("the gated tool ran %d times", n)
	}
}

// TestReleaseIsSingleUseWhenTheLedgerLosesItsEntry: a call's release used,
// then its ledger entry deleted (a bucket restored from an old snapshot,
// an operator's purge), then the exact released message replayed under a
// new message id: the worker finds the call's result and does not run it
// again; the caller's answer is unchanged.
func TestReleaseIsSingleUseWhenTheLedgerLosesItsEntry(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t)
	args := json.RawMessage(`{"text":"pay bob"}`)
	hdr := g.releaseOf(g.signer, "pay-1", args)
	g.publishGated(callBody(t, "pay-1", "echo", args), hdr, g.signer.MessageID("pay-1"))
	if r := g.result(10 * time.Second); r.IsError || r.Content != "pay bob" {
		t.Fatalf("the released call: %+v", r)
	}
	kv, err := g.js.KeyValue(t.Context(), layout.ReleasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), layout.CallToken("pay-1")); err != nil {
		t.Fatal(err)
	}
	seq := g.publishGated(callBody(t, "pay-1", "echo", args), hdr, "replayed")
	if rec := g.refusal(seq); rec.Reason != string(release.ReasonAnswered) {
		t.Errorf("the replay: refusal %+v, want already_answered", rec)
	}
	g.noAnswerYet("the replay")
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the gated tool ran %d times, want once", n)
	}
	if r, ok := g.storedResult("pay-1"); !ok || r.Content != "pay bob" {
		t.Errorf("the stored answer: %+v (found %v)", r, ok)
	}
}

// TestLedgerOutageDoesNotBuryAGenuineCall: while the release ledger
// cannot be written (its bucket gone), a released call neither runs nor is
// refused; the worker asks again in place, the message kept alive, and the
// call runs once the ledger is back. Handing it back instead counted a
// delivery each time: an outage of five seconds buried the approved call as
// worker_lost.
func TestLedgerOutageDoesNotBuryAGenuineCall(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t)
	if err := g.js.DeleteKeyValue(t.Context(), layout.ReleasesBucket); err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"text":"ok"}`)
	g.publishGated(callBody(t, "g", "echo", args), g.releaseOf(g.signer, "g", args), "")
	fleettest.WaitFor(t, 10*time.Second, "the ledger found unwritable", func() bool { return g.logged("cannot check the release ledger now") })
	// The outage lasts past five of the old one-second hand-backs.
	outage := time.NewTimer(6 * time.Second)
	<-outage.C
	g.noAnswerYet("the ledger down")
	if n := g.runs.Load(); n != 0 {
		t.Fatalf("ran %d times without the ledger", n)
	}
	if _, err := layout.EnsureReleases(t.Context(), g.js, layout.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := g.result(15 * time.Second); r.IsError || r.Content != "ok" || g.runs.Load() != 1 || r.Attempt != 1 {
		t.Errorf("after the ledger came back: %+v (runs %d), want it run, on its first delivery", r, g.runs.Load())
	}
	if st := g.w.Stats(); st.Refused != 0 || st.Requeued != 0 {
		t.Errorf("stats %+v: the call was refused or handed back while the ledger was down", st)
	}
}

// failingResults is a JetStream client whose results stream fails its
// next reads: a mock, because a real server cannot be made to fail just
// the worker's look-up of one call's result while the ledger works.
type failingResults struct {
	jetstream.JetStream
	fail *atomic.Int64
}

func (f failingResults) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := f.JetStream.Stream(ctx, name)
	if err != nil || name != layout.ResultsStream {
		return s, err
	}
	return failingStream{Stream: s, fail: f.fail}, nil
}

type failingStream struct {
	jetstream.Stream
	fail *atomic.Int64
}

func (f failingStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	if f.fail.Add(-1) >= 0 {
		return nil, nats.ErrTimeout
	}
	return f.Stream.GetMsg(ctx, seq, opts...)
}

// TestReplayIsRefusedWhenTheResultsReadFailsFirst: the released call ran;
// the ledger loses its entry; a copy is replayed while the results stream
// fails the worker's first reads. The worker asks again until it can tell,
// finds the result and refuses the copy: it never runs a gated call on a
// guess. (Handing it back once used to skip the look-up on the next
// delivery, whose claim was no longer its first, and the copy ran.)
func TestReplayIsRefusedWhenTheResultsReadFailsFirst(t *testing.T) {
	t.Parallel()
	g := &gatedBench{bench: newBench(t), signer: newSigner(t)}
	g.tool = countingEcho(&g.runs, windlass.WithApproval())
	pub, _ := release.ParsePublicKey(g.signer.PublicKey())
	js, err := jetstream.New(g.nats.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	fail := new(atomic.Int64)
	g.w, _ = g.start(worker.Config{JetStream: failingResults{JetStream: js, fail: fail}, Releases: release.NewVerifier(pub)}, g.tool)

	args := json.RawMessage(`{"text":"pay bob"}`)
	hdr := g.releaseOf(g.signer, "pay-1", args)
	g.publishGated(callBody(t, "pay-1", "echo", args), hdr, g.signer.MessageID("pay-1"))
	if r := g.result(10 * time.Second); r.IsError || r.Content != "pay bob" {
		t.Fatalf("the released call: %+v", r)
	}
	kv, err := g.js.KeyValue(t.Context(), layout.ReleasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), layout.CallToken("pay-1")); err != nil {
		t.Fatal(err)
	}
	fail.Store(3)
	seq := g.publishGated(callBody(t, "pay-1", "echo", args), hdr, "replayed")
	if rec := g.refusal(seq); rec.Reason != string(release.ReasonAnswered) {
		t.Errorf("the replay: refusal %+v, want already_answered", rec)
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("the gated tool ran %d times, want once", n)
	}
}

// TestReleaseDecidesDeadlineAndOrigin: a released message's body and
// headers are not signed, the release is: the worker takes the deadline
// (the release's expiry) and the result's destination from the release. A
// genuine but expired release is the call's own answer, timeout; a copy
// that points its result elsewhere still answers the real caller.
func TestReleaseDecidesDeadlineAndOrigin(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t)
	args := json.RawMessage(`{"text":"late"}`)
	hash, _ := release.ArgumentsHash(args)
	expired, err := g.signer.Sign(release.Release{CallID: "late", Tool: "echo", ArgsHash: hash, ExpiresAt: time.Now().Add(-time.Second), Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	// The body claims an hour more.
	body, _ := json.Marshal(windlass.ToolCall{ID: "late", Name: "echo", Arguments: args, Deadline: time.Now().Add(time.Hour)})
	g.publishGated(body, expired, "")
	if r := g.result(10 * time.Second); r.Code() != windlass.CodeTimeout || r.CallID != "late" {
		t.Errorf("an expired release: %+v, want timeout", r)
	}

	// The Windlass-Origin header says "elsewhere"; the release says origin.
	args = json.RawMessage(`{"text":"here"}`)
	m := &nats.Msg{Subject: layout.CallSubject("echo", "routed"), Data: callBody(t, "routed", "echo", args), Header: nats.Header{
		layout.HeaderOrigin: []string{"elsewhere"}, release.Header: []string{g.releaseOf(g.signer, "routed", args)}}}
	if _, err := g.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if r := g.result(10 * time.Second); r.IsError || r.Content != "here" {
		t.Errorf("a release with another origin header: %+v", r)
	}
	if n := g.runs.Load(); n != 1 {
		t.Errorf("ran %d times, want once (the expired release must not run)", n)
	}
}

// TestGatedToolWithoutKeysRunsNothing: a worker with no release keys
// refuses every gated call (fail closed), unanswered.
func TestGatedToolWithoutKeysRunsNothing(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs atomic.Int64
	b.start(worker.Config{}, countingEcho(&runs, windlass.WithApproval()))
	signer := newSigner(t)
	args := json.RawMessage(`{"text":"pay"}`)
	hash, _ := release.ArgumentsHash(args)
	hdr, _ := signer.Sign(release.Release{CallID: "k", Tool: "echo", ArgsHash: hash, ExpiresAt: time.Now().Add(time.Minute)})
	data := callBody(t, "k", "echo", args)
	ack, err := b.js.PublishMsg(t.Context(), &nats.Msg{Subject: layout.CallSubject("echo", "k"), Data: data,
		Header: nats.Header{layout.HeaderOrigin: []string{origin}, release.Header: []string{hdr}}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := b.refusal(ack.Sequence); rec.Reason != string(release.ReasonNoKeys) || !strings.Contains(rec.Detail, "no release keys") {
		t.Errorf("refusal %+v, want no_keys", rec)
	}
	b.noAnswerYet("no keys")
	if runs.Load() != 0 {
		t.Errorf("ran %d times", runs.Load())
	}
}

// TestAnOldReleaseDoesNotUnboundTheHash: a genuine release signed for
// another spec of the tool (redeployed since; this one expired an hour
// ago) or for no spec (a call published without a spec hash), copied onto
// a message of more JSON values than any bound the worker applies to it,
// is refused unhashed, as a release of this spec is: otherwise anyone who
// saw one release header could make the worker decode and sort whatever a
// message (or an object by reference, up to the payload limit) holds, as
// often as they like. (Found by a review helper: for both, the first
// version of the spec-aware bound gave none.)
func TestAnOldReleaseDoesNotUnboundTheHash(t *testing.T) {
	t.Parallel()
	g := newGatedBench(t, windlass.WithMaxArgumentValues(3))
	old := countingEcho(new(atomic.Int64), windlass.WithApproval(), windlass.WithMaxArgumentValues(10)).Spec()
	approved := json.RawMessage(`{"text":"pay bob"}`)
	hash, err := release.ArgumentsHash(approved)
	if err != nil {
		t.Fatal(err)
	}
	huge := json.RawMessage(`{"text":"pay bob","xs":[` + strings.Repeat("0,", windlass.DefaultMaxArgumentValues) + `0]}`)
	for _, c := range []struct{ name, spec string }{{"another spec, expired", old.Hash()}, {"no spec", ""}} {
		id := "pay-old-" + strings.ReplaceAll(strings.ReplaceAll(c.name, " ", "-"), ",", "")
		hdr, err := g.signer.Sign(release.Release{CallID: id, Tool: "echo", SpecHash: c.spec, ArgsHash: hash,
			ExpiresAt: time.Now().Add(-time.Hour), ApprovedBy: []string{"alice"}, Origin: origin})
		if err != nil {
			t.Fatal(err)
		}
		seq := g.publishGated(callBody(t, id, "echo", huge), hdr, "copy-"+id)
		rec := g.refusal(seq)
		if rec.Reason != string(release.ReasonArgsMismatch) || !strings.Contains(rec.Detail, "more than") {
			t.Errorf("%s: refusal %s %.160q; want args_mismatch unhashed (more than a bound of values)", c.name, rec.Reason, rec.Detail)
		}
	}
	g.noAnswerYet("a copied release")
}
