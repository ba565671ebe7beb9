package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// An MCP client lists and calls the fleet's tools through the handler,
// mounted at /mcp.
func ExampleNew() {
	ctx := context.Background()
	var closers []func()
	defer func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}()
	// A fleet: NATS, Redis, and a worker serving "add".
	ns := must(testserver.NewNATS())
	closers = append(closers, ns.Close)
	rs := must(testserver.NewRedis())
	closers = append(closers, rs.Close)
	nc := must(nats.Connect(ns.URL()))
	closers = append(closers, nc.Close)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	closers = append(closers, func() { _ = rc.Close() })
	reg := must(registry.New(registry.Config{Client: rc, ResyncInterval: 100 * time.Millisecond}))
	w := must(worker.New(worker.Config{JetStream: must(jetstream.New(nc)), Registry: reg}))
	add := windlass.MustFunc("add", func(ctx context.Context, in addArgs) (float64, error) { return in.A + in.B, nil },
		windlass.WithDescription("Add two numbers."))
	if err := w.Register(add); err != nil {
		panic(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	closers = append(closers, func() { stopWorker(); <-workerDone })

	d := must(dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg}))
	closers = append(closers, func() { _ = d.Close() })
	for cat, _ := d.Catalog(ctx); len(cat) == 0; cat, _ = d.Catalog(ctx) {
		time.Sleep(10 * time.Millisecond) // until the worker is live
	}

	// The MCP server, mounted at /mcp.
	h := must(mcpserver.New(ctx, mcpserver.Config{Dispatcher: d}))
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := httptest.NewServer(mux)
	closers = append(closers, srv.Close, func() { _ = h.Close() })

	// Any MCP client: here the SDK's.
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	cs := must(client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil))
	closers = append(closers, func() { _ = cs.Close() })
	tools := must(cs.ListTools(ctx, nil))
	fmt.Println(tools.Tools[0].Name, "-", tools.Tools[0].Description)
	res := must(cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}}))
	fmt.Println(res.Content[0].(*mcp.TextContent).Text, res.IsError)
	// Output:
	// add - Add two numbers.
	// 3 false
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
