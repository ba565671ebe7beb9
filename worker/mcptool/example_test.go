package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
	"github.com/windlass-dev/windlass/worker/mcptool"
)

// A remote MCP server's tool, "docs.search", becomes the fleet tool
// "docs_search", called like any other.
func ExampleBridge() {
	ctx := context.Background()
	var closers []func()
	defer func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}()
	// A remote MCP server.
	remote := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "v1"}, nil)
	remote.AddTool(&mcp.Tool{Name: "docs.search", Description: "Search the docs.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Q string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "3 pages about " + in.Q}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return remote }, nil))
	closers = append(closers, srv.Close)

	// The fleet: NATS and Redis.
	ns := must(testserver.NewNATS())
	closers = append(closers, ns.Close)
	rs := must(testserver.NewRedis())
	closers = append(closers, rs.Close)
	nc := must(nats.Connect(ns.URL()))
	closers = append(closers, nc.Close)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	closers = append(closers, func() { _ = rc.Close() })
	reg := must(registry.New(registry.Config{Client: rc, ResyncInterval: 100 * time.Millisecond}))

	// The bridge serves the remote tools in the fleet until its ctx ends.
	b := must(mcptool.New(mcptool.Config{
		Servers: []mcptool.Server{{URL: srv.URL}},
		Worker:  worker.Config{JetStream: must(jetstream.New(nc)), Registry: reg},
	}))
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	closers = append(closers, func() { stop(); <-done })

	d := must(dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg}))
	closers = append(closers, func() { _ = d.Close() })
	for cat, _ := d.Catalog(ctx); len(cat) == 0; cat, _ = d.Catalog(ctx) {
		time.Sleep(10 * time.Millisecond) // until the bridge's worker is live
	}
	fmt.Println(b.Mapping()[0].Remote, "->", b.Mapping()[0].Tool)
	res, _ := d.Call(ctx, "docs_search", map[string]any{"q": "deadlines"})
	fmt.Println(res.Content)
	// Output:
	// docs.search -> docs_search
	// 3 pages about deadlines
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
