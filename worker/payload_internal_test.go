package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestResultInlineLimitEdge: a result whose message is exactly the inline
// limit travels inline; one byte over, its content and value travel by
// reference (one object: a value other than a string renders as its own
// JSON), and fetching them gives the result back; over the tool's limit,
// it is answered result_too_large and nothing is stored.
func TestResultInlineLimitEdge(t *testing.T) {
	t.Parallel()
	nc := testserver.StartNATS(t).Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := layout.EnsurePayloads(t.Context(), js, layout.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	w.payloads = payload.New(obs, nc)
	d := &delivery{ctx: context.Background(), t: &registered{}, baseLog: slog.New(slog.DiscardHandler), origin: "d1"}
	value := `{"rows":["` + strings.Repeat("r", 5000) + `"]}`
	result := windlass.ToolResult{CallID: "edge", Name: "rows", Content: value, Data: []byte(value), DurationMS: 1.5}

	w.inline = 1 << 20
	_, m, err := w.resultMessage(d, result)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(layout.MessageSize(m))

	w.inline = size // exactly at the limit
	sent, m, err := w.resultMessage(d, result)
	if err != nil || sent.DataRef != nil || sent.ContentRef != nil || sent.Content != value || int64(layout.MessageSize(m)) != size {
		t.Fatalf("at the limit: sent refs %v %v, %d content bytes, %v; want it inline", sent.DataRef, sent.ContentRef, len(sent.Content), err)
	}
	objects := func() uint64 {
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
	if n := objects(); n != 0 {
		t.Fatalf("at the limit, the bucket holds %d messages", n)
	}

	w.inline = size - 1 // one byte over
	sent, m, err = w.resultMessage(d, result)
	if err != nil || sent.DataRef == nil || sent.ContentRef == nil || *sent.ContentRef != *sent.DataRef || sent.Content != "" || sent.Data != nil {
		t.Fatalf("one byte over: sent refs %v %v, %d content bytes, %v; want content and value by one reference", sent.ContentRef, sent.DataRef, len(sent.Content), err)
	}
	if int64(layout.MessageSize(m)) >= size {
		t.Errorf("by reference, the message is %d bytes, not smaller than %d", layout.MessageSize(m), size)
	}
	back, err := w.payloads.Resolve(t.Context(), sent, 1<<20)
	if err != nil || back.Content != value || string(back.Data) != value {
		t.Errorf("resolved: %d content bytes, %v", len(back.Content), err)
	}

	// A string value renders as itself: one object, its JSON, and no
	// content reference: the reader takes the string from the value.
	w.inline = 4 << 10
	text := strings.Repeat("t\n\"é\u2028", 600)
	str := windlass.ToolResult{CallID: "edge2", Name: "rows", Content: text, Data: quoted(t, text)}
	sent, _, err = w.resultMessage(d, str)
	if err != nil || sent.ContentRef != nil || sent.DataRef == nil {
		t.Fatalf("a string value: sent refs %v %v, %v; want the value's alone", sent.ContentRef, sent.DataRef, err)
	}
	if back, err := w.payloads.Resolve(t.Context(), sent, 1<<20); err != nil || back.Content != text || string(back.Data) != string(str.Data) {
		t.Errorf("a string value resolved: %d content bytes, %v", len(back.Content), err)
	}
	// A content that is not the value's rendering (a proxy's summary of
	// its value): two objects.
	summary := windlass.ToolResult{CallID: "edge3", Name: "rows", Content: strings.Repeat("s", 3000), Data: []byte(value)}
	sent, _, err = w.resultMessage(d, summary)
	if err != nil || sent.ContentRef == nil || sent.DataRef == nil || *sent.ContentRef == *sent.DataRef {
		t.Fatalf("a summary: sent refs %v %v, %v; want two references", sent.ContentRef, sent.DataRef, err)
	}
	if back, err := w.payloads.Resolve(t.Context(), sent, 1<<20); err != nil || back.Content != summary.Content || string(back.Data) != value {
		t.Errorf("a summary resolved: %d content bytes, %v", len(back.Content), err)
	}

	before := objects()
	d.t = &registered{cfg: toolConfig{payloadLimit: int64(len(value)) - 1}}
	sent, _, err = w.resultMessage(d, result)
	if err != nil || sent.Code() != windlass.CodeResultTooLarge || !strings.Contains(sent.Content, fmt.Sprintf("is %d bytes", len(value))) || !strings.Contains(sent.Content, fmt.Sprintf("limit of %d bytes", len(value)-1)) {
		t.Errorf("over the tool's limit: sent %q, %v; want result_too_large naming the size and the limit", sent.Content, err)
	}
	if after := objects(); after != before {
		t.Errorf("over the tool's limit, the bucket went from %d to %d messages", before, after)
	}
}

// quoted is s's JSON, as encoding/json writes it.
func quoted(t *testing.T, s string) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
