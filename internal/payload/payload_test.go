package payload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore is a store over a payloads bucket on a server of the test's own.
func newStore(t *testing.T) (*payload.Store, jetstream.ObjectStore) {
	t.Helper()
	return storeOver(t, testserver.StartNATS(t).Connect(t))
}

// storeOver is a store over the payloads bucket (made when missing) on the
// connection nc.
func storeOver(t *testing.T, nc *nats.Conn) (*payload.Store, jetstream.ObjectStore) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := layout.EnsurePayloads(t.Context(), js, layout.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return payload.New(obs, nc), obs
}

// TestGetUsesOnlyWhatTheReferenceSays: a payload comes back as it was
// put, under a name of its own each time; an object is refused, unread,
// when its reference is over the reader's limit, names another bucket,
// says another size or digest, or names nothing.
func TestGetUsesOnlyWhatTheReferenceSays(t *testing.T) {
	t.Parallel()
	s, obs := newStore(t)
	data := []byte(strings.Repeat("payload ", 100_000))
	ref, err := s.Put(t.Context(), layout.PayloadArguments, "c1", data)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.PutString(t.Context(), layout.PayloadArguments, "c1", string(data))
	if err != nil {
		t.Fatal(err)
	}
	if again.Name == ref.Name || again.SHA256 != ref.SHA256 || again.Size != ref.Size {
		t.Errorf("a second upload for the call: %+v after %+v; want another name, the same size and digest", again, ref)
	}
	if got, err := s.Get(t.Context(), ref, 0); err != nil || string(got) != string(data) {
		t.Fatalf("Get = %d bytes, %v", len(got), err)
	}

	var tooLarge *payload.TooLargeError
	if _, err := s.Get(t.Context(), ref, ref.Size-1); !errors.As(err, &tooLarge) || tooLarge.Size != ref.Size || tooLarge.Limit != ref.Size-1 {
		t.Errorf("over the limit: %v; want a TooLargeError naming both", err)
	}
	other := ref
	other.Bucket = "ELSEWHERE"
	otherSize := ref
	otherSize.Size++
	otherSum := ref
	otherSum.SHA256 = strings.Repeat("0", 64)
	gone := ref
	gone.Name = "args.nothing.here"
	if err := obs.Delete(t.Context(), again.Name); err != nil {
		t.Fatal(err)
	}
	deleted := again
	for name, r := range map[string]windlass.PayloadRef{"another bucket": other, "another size": otherSize, "another digest": otherSum,
		"no such object": gone, "a deleted object": deleted, "a malformed reference": {Bucket: layout.PayloadsBucket, Name: "x", SHA256: "abc"}} {
		if got, err := s.Get(t.Context(), r, 0); !errors.Is(err, payload.ErrUnreadable) || got != nil {
			t.Errorf("%s: Get = %d bytes, %v; want ErrUnreadable", name, len(got), err)
		}
	}
}

// TestResolveTakesTheContentFromTheValue: a result offloaded with a
// string value is the value's object alone, and resolves to the same
// content and value; a value that is its own content (an object, a
// json.RawMessage) is one object named twice; a content that is not the
// value's rendering is an object of its own.
func TestResolveTakesTheContentFromTheValue(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	text := strings.Repeat("line \"one\"\n\t\u00e9\u2028", 10_000)
	quoted := `"` + strings.NewReplacer("\"", `\"`, "\n", `\n`, "\t", `\t`, "\u2028", `\u2028`).Replace(text) + `"`
	for _, tt := range []struct {
		name    string
		r       windlass.ToolResult
		objects string // "data": the value's alone; "same": content_ref names it too; "two"; "content"
	}{
		{"a string", windlass.ToolResult{CallID: "c2", Name: "t", Content: text, Data: []byte(quoted)}, "data"},
		{"a json.RawMessage of a string", windlass.ToolResult{CallID: "c3", Name: "t", Content: quoted, Data: []byte(quoted)}, "same"},
		{"an object", windlass.ToolResult{CallID: "c4", Name: "t", Content: `{"a":1}`, Data: []byte(`{"a":1}`)}, "same"},
		{"a summary", windlass.ToolResult{CallID: "c5", Name: "t", Content: "two rows", Data: []byte(`[1,2]`)}, "two"},
		{"an error's text", windlass.ToolResult{CallID: "c6", Name: "t", Content: text, IsError: true}, "content"},
	} {
		stub, err := s.Offload(t.Context(), tt.r)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var objects string
		switch {
		case stub.ContentRef == nil && stub.DataRef != nil:
			objects = "data"
		case stub.ContentRef != nil && stub.DataRef != nil && *stub.ContentRef == *stub.DataRef:
			objects = "same"
		case stub.ContentRef != nil && stub.DataRef != nil:
			objects = "two"
		case stub.ContentRef != nil:
			objects = "content"
		}
		if objects != tt.objects || stub.Content != "" || stub.Data != nil {
			t.Errorf("%s: objects %q, want %q (stub content %q)", tt.name, objects, tt.objects, stub.Content)
		}
		back, err := s.Resolve(t.Context(), stub, 0)
		if err != nil || back.Content != tt.r.Content || string(back.Data) != string(tt.r.Data) || back.ContentRef != nil || back.DataRef != nil {
			t.Errorf("%s: resolved %.40q / %.40q, %v", tt.name, back.Content, back.Data, err)
		}
	}
}
