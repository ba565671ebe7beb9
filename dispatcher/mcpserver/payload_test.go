package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
