package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestMCPCommands: `windlass worker --mcp PREFIX=URL` serves a remote MCP
// server's tool in the fleet, and an MCP client lists and calls it through
// `windlass dispatcher` at /mcp.
func TestMCPCommands(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	ns, rs := testserver.StartNATS(t), testserver.StartRedis(t)
	remote := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "v1"}, nil)
	remote.AddTool(&mcp.Tool{Name: "lookup.word", Description: "Look a word up.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a definition"}}}, nil
		})
	remoteSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return remote }, nil))
	t.Cleanup(remoteSrv.Close)
	t.Cleanup(func() {
		for s := range remote.Sessions() {
			_ = s.Close()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr testserver.Buffer
	fleet := []string{"--nats-url", ns.URL(), "--redis-url", rs.URL()}
	workerDone, dispatcherDone := make(chan error, 1), make(chan error, 1)
	go func() {
		workerDone <- run(ctx, append([]string{"worker", "--mcp", "ext_=" + remoteSrv.URL}, fleet...), io.Discard, &stderr)
	}()
	go func() {
		dispatcherDone <- run(ctx, append([]string{"dispatcher", "--listen", addr}, fleet...), io.Discard, &stderr)
	}()

	var cs *mcp.ClientSession
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ext_lookup_word through %s/mcp within 60s\n%s", addr, stderr.String())
		}
		if cs == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cs, _ = client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", MaxRetries: -1}, nil)
			cancel()
			if cs == nil {
				continue
			}
		}
		if res, err := cs.ListTools(ctx, nil); err == nil && len(res.Tools) == 1 && res.Tools[0].Name == "ext_lookup_word" {
			break
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ext_lookup_word"})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "a definition" {
		t.Fatalf("call = %+v, %v", res, err)
	}
	_ = cs.Close()
	stop()
	for name, done := range map[string]chan error{"worker": workerDone, "dispatcher": dispatcherDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s stopped with %v\n%s", name, err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop", name)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
