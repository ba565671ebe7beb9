package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/worker"
)

// TestLargePayloads: a tools/call whose arguments and result are 10 MiB
// and 50 MiB — over the NATS server's max payload, so they travel by
// reference in the fleet — returns the full content, as if inline.
func TestLargePayloads(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	mirror := windlass.MustFunc("mirror", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	}, windlass.WithTimeout(3*time.Minute)) // 50 MiB under -race on a loaded machine: past the default 30 s
	f.startWorker(worker.Config{}, mirror)
	cs := connect(t, serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})}), nil)
	listTools(t, cs)
	for _, size := range []int{10 << 20, 50 << 20} {
		want := strings.Repeat("0123456789abcdef", size/16)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "mirror", Arguments: map[string]any{"text": want}})
		if err != nil || res.IsError || text(res) != want {
			got := ""
			if res != nil {
				got = text(res)
			}
			t.Fatalf("%d bytes: CallTool = %d bytes (%.200q), error %v; want the text back", size, len(got), got, err)
		}
	}
}

// A client's name (clientInfo.name) goes into every call's metadata
// (mcp_client) cut to 256 bytes. Before, it was copied whole: a client
// named with 2 MiB (a request body may hold the payload limit plus 1 MiB)
// got "unavailable: nats: maximum payload exceeded" for every tools/call,
// a code that says to try again for a call that could never be accepted.
// (Found by a review helper.)
func TestHugeClientNameIsCut(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	client := windlass.MustFunc("client", func(ctx context.Context, in struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		return info.Metadata["mcp_client"], nil
	})
	f.startWorker(worker.Config{}, client)
	url := serve(t, mcpserver.Config{Dispatcher: f.Dispatcher(dispatcher.Config{})})
	name := strings.Repeat("é", 1<<20) // 2 MiB, a multi-byte character to cut
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "v0"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "client", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	got := text(res)
	if res.IsError || len(got) > 256 || !utf8.ValidString(got) || !strings.HasPrefix(got, "éé") {
		t.Errorf("tools/call from a client with a 2 MiB name = isError %v, code %v, %d bytes %.300q; want the call made, its mcp_client the name's start, valid UTF-8, at most 256 bytes",
			res.IsError, res.Meta[mcpserver.MetaErrorCode], len(got), got)
	}
}
