package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

type echoArgs struct {
	Text string `json:"text"`
}

// add and echo are the examples' tools, which the worker of startFleet
// serves.
var (
	add = windlass.MustFunc("add", func(ctx context.Context, in addArgs) (int, error) {
		return in.A + in.B, nil
	}, windlass.WithDescription("Add two numbers."))

	echo = windlass.MustFunc("echo", func(ctx context.Context, in echoArgs) (string, error) {
		return in.Text, nil
	}, windlass.WithDescription("Echo text."))
)

func ExampleDispatcher_Call() {
	ctx := context.Background()
	fleet := startFleet(add)
	defer fleet.Close()

	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: fleet.Conn, Registry: fleet.Registry})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	waitForTools(ctx, d, "add")

	res, err := d.Call(ctx, "add", json.RawMessage(`{"a":1,"b":2}`), dispatcher.WithTimeout(10*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Content)

	// Arguments that do not match the schema never reach the queue.
	res, _ = d.Call(ctx, "add", json.RawMessage(`{"a":"one","b":2}`))
	fmt.Println(res.IsError, res.Error.Code)
	// Output:
	// 3
	// true invalid_arguments
}

// Submit returns at once; any dispatcher instance can Wait for the result.
func ExampleDispatcher_Submit() {
	ctx := context.Background()
	fleet := startFleet(add)
	defer fleet.Close()

	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: fleet.Conn, Registry: fleet.Registry})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	waitForTools(ctx, d, "add")

	id, err := d.Submit(ctx, "add", addArgs{A: 2, B: 3}, dispatcher.WithCallID("call_42"))
	if err != nil {
		panic(err)
	}
	res, err := d.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(id, res.Content)
	// Output: call_42 5
}

// Tools lists the fleet's live tools in a provider's format, ready for the
// model.
func ExampleDispatcher_Tools() {
	ctx := context.Background()
	fleet := startFleet(add, echo)
	defer fleet.Close()

	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: fleet.Conn, Registry: fleet.Registry})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	waitForTools(ctx, d, "add", "echo")

	tools, err := d.Tools(ctx, windlass.StyleAnthropic)
	if err != nil {
		panic(err)
	}
	for _, tool := range tools {
		fmt.Println(tool["name"])
	}
	// Output:
	// add
	// echo
}

// A fleet tool is a windlass.Tool: invoking it gives the same result as
// invoking the local tool.
func ExampleDispatcher_Tool() {
	ctx := context.Background()
	fleet := startFleet(add)
	defer fleet.Close()

	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: fleet.Conn, Registry: fleet.Registry})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	waitForTools(ctx, d, "add")

	remote, err := d.Tool("add")
	if err != nil {
		panic(err)
	}
	call := windlass.ToolCall{ID: "call_1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)}
	fmt.Println("remote:", windlass.Invoke(ctx, remote, call).Content)
	fmt.Println("local: ", windlass.Invoke(ctx, add, call).Content)
	// Output:
	// remote: 3
	// local:  3
}

// fleet is what the examples run on: a NATS server and a Redis server of
// their own, a connection to each, a registry, and a worker serving tools.
type fleet struct {
	Conn     *nats.Conn
	Registry *registry.Registry
	closers  []func()
}

// startFleet starts the servers, connects to them and runs a worker serving
// tools. It panics on error, after closing what it had started.
func startFleet(tools ...windlass.Tool) *fleet {
	f, started := &fleet{}, false
	defer func() {
		if !started {
			f.Close()
		}
	}()
	ns := must(testserver.NewNATS())
	f.closers = append(f.closers, ns.Close)
	rs := must(testserver.NewRedis())
	f.closers = append(f.closers, rs.Close)
	f.Conn = must(nats.Connect(ns.URL()))
	f.closers = append(f.closers, f.Conn.Close)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	f.closers = append(f.closers, func() { _ = client.Close() })
	f.Registry = must(registry.New(registry.Config{Client: client}))

	w := must(worker.New(worker.Config{JetStream: must(jetstream.New(f.Conn)), Registry: f.Registry}))
	for _, tool := range tools {
		if err := w.Register(tool); err != nil {
			panic(err)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	f.closers = append(f.closers, func() { stop(); <-done })
	started = true
	return f
}

// Close stops the worker, closes the connections and stops the servers.
func (f *fleet) Close() {
	for _, c := range slices.Backward(f.closers) {
		c()
	}
	f.closers = nil
}

// waitForTools waits until the dispatcher's catalog lists the tools, that
// is until a worker of each is live, polling for at most 10s. It panics
// when they do not appear.
func waitForTools(ctx context.Context, d *dispatcher.Dispatcher, names ...string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tools, err := d.Catalog(ctx)
		if err != nil {
			panic(err)
		}
		live := 0
		for _, t := range tools {
			if slices.Contains(names, t.Spec.Name) {
				live++
			}
		}
		if live == len(names) {
			return
		}
	}
	panic(fmt.Sprintf("no live worker of %v within 10s", names))
}

// must returns v, or panics with err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
