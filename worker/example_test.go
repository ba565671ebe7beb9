package worker_test

import (
	"context"
	"fmt"
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

type greetArgs struct {
	Name string `json:"name"`
}

// A worker serves its tools until Run's context ends, then drains, withdraws
// from the registry and returns.
func ExampleWorker_Run() {
	ctx := context.Background()
	// A NATS server and a Redis server of the example's own.
	ns, err := testserver.NewNATS()
	if err != nil {
		panic(err)
	}
	defer ns.Close()
	rs, err := testserver.NewRedis()
	if err != nil {
		panic(err)
	}
	defer rs.Close()

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	client := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer client.Close()
	reg, err := registry.New(registry.Config{Client: client})
	if err != nil {
		panic(err)
	}

	greet := windlass.MustFunc("greet", func(ctx context.Context, in greetArgs) (string, error) {
		return "Hello, " + in.Name + "!", nil
	}, windlass.WithDescription("Greet someone by name."))
	w, err := worker.New(worker.Config{JetStream: js, Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := w.Register(greet); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	// Call it through the fleet, once a dispatcher sees the worker.
	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := waitForTool(ctx, d, "greet"); err != nil {
		panic(err)
	}
	res, err := d.Call(ctx, "greet", greetArgs{Name: "Ada"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Content)

	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println("stopped")
	// Output:
	// Hello, Ada!
	// stopped
}

// waitForTool waits until the dispatcher's catalog lists the tool, that is
// until a worker of it is live, polling for at most 10s.
func waitForTool(ctx context.Context, d *dispatcher.Dispatcher, name string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tools, err := d.Catalog(ctx)
		if err != nil {
			return err
		}
		for _, t := range tools {
			if t.Spec.Name == name {
				return nil
			}
		}
	}
	return fmt.Errorf("no live worker of %s within 10s", name)
}
