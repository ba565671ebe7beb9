package dispatcher_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/worker"
)

type mirrorArgs struct {
	Text string `json:"text"`
}

// mirror returns its text, counting its runs.
func mirror(runs *atomic.Int64) windlass.Tool {
	return windlass.MustFunc("mirror", func(ctx context.Context, in mirrorArgs) (string, error) {
		runs.Add(1)
		return in.Text, nil
	}, windlass.WithTimeout(largePayloadTimeout))
}

// largePayloadTimeout is the mirror tool's timeout: 50 MiB each way through
// the object store, under -race on a loaded machine, can take longer than
// the default 30 s; these tests are about the payload, not its speed.
const largePayloadTimeout = 3 * time.Minute

// bigText is n bytes of text with some variety (so a digest of a part
// differs from another part's).
func bigText(n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; b.Len() < n; i++ {
		b.WriteString("line ")
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 58))
		b.WriteByte('\n')
	}
	return b.String()[:n]
}

// TestPayloadsByReference: arguments and results of 10 MiB and 50 MiB —
// ten and fifty times the NATS server's max payload — go through the
// fleet as if inline: Call, Submit then Wait, Result and Status all see
// the full value, and the tool runs once with its full arguments.
func TestPayloadsByReference(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEnv(t, mirror(&runs))
	for _, size := range []int{10 << 20, 50 << 20} {
		text := bigText(size)
		r, err := e.d.Call(t.Context(), "mirror", mirrorArgs{Text: text}, dispatcher.WithTimeout(largePayloadTimeout+time.Minute))
		if err != nil || r.IsError || r.Content != text {
			t.Fatalf("%d bytes: Call = %.200v, %v; want the text back", size, r, err)
		}
		var got string
		if err := r.Decode(&got); err != nil || got != text {
			t.Fatalf("%d bytes: Decode = %d bytes, %v", size, len(got), err)
		}
		if r.ContentRef != nil || r.DataRef != nil {
			t.Errorf("%d bytes: the caller sees references %+v %+v", size, r.ContentRef, r.DataRef)
		}
		fleettest.StoredResult(t, e.JetStream(), r.CallID) // Call returns a moment before the store
		stored, err := e.d.Result(t.Context(), r.CallID)
		if err != nil || stored.Content != text {
			t.Errorf("%d bytes: Result = %.200v, %v", size, stored, err)
		}
		st, err := e.d.Status(t.Context(), r.CallID)
		if err != nil || st.Result == nil || st.Result.Content != text {
			t.Errorf("%d bytes: Status = %.200v, %v", size, st, err)
		}
	}
	id, err := e.d.Submit(t.Context(), "mirror", mirrorArgs{Text: bigText(10 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.d.Wait(t.Context(), id)
	if err != nil || len(r.Content) != 10<<20 {
		t.Errorf("Wait = %.200v, %v", r, err)
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("the tool ran %d times, want 3", n)
	}
}

// callMessages subscribes to the calls of a tool as they are published
// (a plain subscription sees each message as sent) and returns them.
func callMessages(t *testing.T, nc *nats.Conn, tool string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(layout.CallsOfTool(tool), ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// objectCount is the number of messages in the payloads bucket's stream.
func objectCount(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), "OBJ_"+layout.PayloadsBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestArgumentsInlineLimitEdge: a call whose message is exactly the
// dispatcher's inline limit is published inline; one byte over, its
// arguments go by reference and the tool still gets them in full;
// arguments over the payload limit are refused payload_too_large, naming
// the size and the limit, and nothing is stored.
func TestArgumentsInlineLimitEdge(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEnv(t, mirror(&runs))
	nc := e.Conn()
	seen := callMessages(t, nc, "mirror")
	text := bigText(4000)
	deadline := time.Now().Add(time.Hour).Truncate(time.Second)
	call := func(d *dispatcher.Dispatcher, id string) (windlass.ToolResult, *nats.Msg) {
		t.Helper()
		r, err := d.Call(t.Context(), "mirror", mirrorArgs{Text: text}, dispatcher.WithCallID(id), dispatcher.WithDeadline(deadline))
		if err != nil || r.Content != text {
			t.Fatalf("call %s = %.200v, %v", id, r, err)
		}
		select {
		case m := <-seen:
			return r, m
		case <-time.After(30 * time.Second):
			t.Fatalf("call %s: no message seen", id)
		}
		return r, nil
	}
	_, m := call(e.d, "edge-1")
	size := int64(layout.MessageSize(m))

	at := e.Dispatcher(dispatcher.Config{InlineLimit: size})
	fleettest.WaitCatalog(t, at, "mirror")
	if _, m := call(at, "edge-2"); int64(layout.MessageSize(m)) != size || strings.Contains(string(m.Data), "arguments_ref") {
		t.Errorf("at the limit: a %d-byte message %.120s; want the %d-byte call inline", layout.MessageSize(m), m.Data, size)
	}
	over := e.Dispatcher(dispatcher.Config{InlineLimit: size - 1})
	fleettest.WaitCatalog(t, over, "mirror")
	_, m = call(over, "edge-3")
	var sent windlass.ToolCall
	if err := json.Unmarshal(m.Data, &sent); err != nil || sent.ArgumentsRef == nil || string(sent.Arguments) != windlass.ArgumentsByReference {
		t.Fatalf("one byte over: message %s; want the arguments by reference", m.Data)
	}
	canonical, _ := json.Marshal(mirrorArgs{Text: text})
	sum := sha256.Sum256(canonical)
	if ref := sent.ArgumentsRef; ref.Size != int64(len(canonical)) || ref.SHA256 != hex.EncodeToString(sum[:]) || ref.Bucket != layout.PayloadsBucket ||
		!strings.Contains(ref.Name, layout.CallToken("edge-3")) {
		t.Errorf("reference %+v: want the arguments' size and SHA-256, in the fleet's bucket, named after the call", ref)
	}

	js := e.JetStream()
	before := objectCount(t, js)
	small := e.Dispatcher(dispatcher.Config{InlineLimit: 1 << 10, PayloadLimit: 2 << 10})
	fleettest.WaitCatalog(t, small, "mirror")
	args, _ := json.Marshal(mirrorArgs{Text: bigText(3 << 10)})
	r, err := small.Call(t.Context(), "mirror", json.RawMessage(args))
	if want := fmt.Sprintf("are %d bytes, over the fleet's limit of 2048 bytes", len(args)); err != nil || r.Code() != windlass.CodePayloadTooLarge || !strings.Contains(r.Content, want) {
		t.Errorf("over the payload limit: %v, %v; want payload_too_large saying %q", r.Content, err, want)
	}
	if after := objectCount(t, js); after != before {
		t.Errorf("a refused call stored %d objects' messages", after-before)
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("the tool ran %d times, want 3", n)
	}
}

// TestPayloadDigestMismatch: an object that is not what its reference
// says — a call forged with a reference to other bytes, a result object
// replaced after it was stored — is answered payload_unreadable, never
// used as data: the tool does not run on the forged arguments, and the
// caller is not handed the replaced result.
func TestPayloadDigestMismatch(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEnv(t, mirror(&runs))
	js := e.JetStream()
	obs, err := js.ObjectStore(t.Context(), layout.PayloadsBucket)
	if err != nil {
		t.Fatal(err)
	}

	// A forged call: its reference's digest is of other arguments.
	real, forged := []byte(`{"text":"pay alice"}`), []byte(`{"text":"pay mallet"}`)
	if _, err := obs.PutBytes(t.Context(), "args.forged", forged); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(real)
	call := windlass.ToolCall{ID: "forged-ref", Name: "mirror", Arguments: json.RawMessage(windlass.ArgumentsByReference),
		ArgumentsRef: &windlass.PayloadRef{Bucket: layout.PayloadsBucket, Name: "args.forged", Size: int64(len(forged)), SHA256: hex.EncodeToString(sum[:])}}
	data, _ := json.Marshal(call)
	if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: layout.CallSubject("mirror", call.ID), Data: data,
		Header: nats.Header{layout.HeaderOrigin: []string{e.d.ID()}}}); err != nil {
		t.Fatal(err)
	}
	r, err := e.d.Wait(t.Context(), call.ID)
	if err != nil || r.Code() != windlass.CodePayloadUnreadable || !strings.Contains(r.Content, "SHA-256") || strings.Contains(r.Content, "mallet") {
		t.Errorf("forged reference: %q, %v; want payload_unreadable naming the digest", r.Content, err)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times on forged arguments", n)
	}

	// A stored result whose object is replaced by bytes of the same size.
	text := bigText(2 << 20)
	r, err = e.d.Call(t.Context(), "mirror", mirrorArgs{Text: text})
	if err != nil || r.Content != text {
		t.Fatalf("Call = %.100v, %v", r.Content, err)
	}
	raw := fleettest.StoredResult(t, js, r.CallID)
	var stub windlass.ToolResult
	if err := json.Unmarshal(raw.Data, &stub); err != nil || stub.DataRef == nil {
		t.Fatalf("stored result %s: want the value by reference", raw.Data)
	}
	value, err := obs.GetBytes(t.Context(), stub.DataRef.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(t.Context(), stub.DataRef.Name, []byte(strings.ToUpper(string(value)))); err != nil { // same size
		t.Fatal(err)
	}
	got, err := e.d.Result(t.Context(), r.CallID)
	if err != nil || got.Code() != windlass.CodePayloadUnreadable || strings.Contains(got.Content, "LINE") || got.Data != nil {
		t.Errorf("replaced result: %.200q, %v; want payload_unreadable", got.Content, err)
	}
}

// TestPayloadsExpireWithTheirResults: objects live as long as the results
// (the bucket's TTL is the results stream's max age): a result's objects
// and an upload no stored message points at (a call never accepted) are
// gone after it, and so is the result.
func TestPayloadsExpireWithTheirResults(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	js := f.JetStream()
	opts := layout.StreamOptions{ResultsMaxAge: 2 * time.Second, Duplicates: time.Second}
	if err := layout.EnsureStreams(t.Context(), js, layout.AllStreams(opts)...); err != nil {
		t.Fatal(err)
	}
	obs, err := layout.EnsurePayloads(t.Context(), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	f.StartWorker(worker.Config{}, mirror(&runs))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "mirror")
	text := bigText(1 << 20)
	r, err := d.Call(t.Context(), "mirror", mirrorArgs{Text: text})
	if err != nil || r.Content != text {
		t.Fatalf("Call = %.100q, %v", r.Content, err)
	}
	if _, err := obs.PutBytes(t.Context(), layout.PayloadObject(layout.PayloadArguments, "never-accepted", "x"), []byte(text)); err != nil {
		t.Fatal(err)
	}
	if n := objectCount(t, js); n == 0 {
		t.Fatal("no objects stored")
	}
	fleettest.WaitFor(t, 60*time.Second, "the payloads bucket emptied by its TTL", func() bool { return objectCount(t, js) == 0 })
	if _, err := d.Result(t.Context(), r.CallID); !errors.Is(err, dispatcher.ErrNoResult) {
		t.Errorf("Result after the lifetime = %v; want ErrNoResult", err)
	}
}
