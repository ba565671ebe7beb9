package registry_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// A worker advertises its tools and holds the lease until it withdraws it;
// anyone can look a tool up.
func ExampleRegistry_Advertise() {
	ctx := context.Background()
	rs, err := testserver.NewRedis() // a redis-server of the example's own
	if err != nil {
		panic(err)
	}
	defer rs.Close()
	client := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer client.Close()
	reg, err := registry.New(registry.Config{Client: client})
	if err != nil {
		panic(err)
	}

	echo := windlass.Spec{Name: "echo", Description: "Echo text."}
	lease, err := reg.Advertise(ctx, registry.Advertisement{WorkerID: "worker-1", Specs: []windlass.Spec{echo}})
	if err != nil {
		panic(err)
	}
	defer lease.Withdraw(ctx)

	info, err := reg.Lookup(ctx, "echo")
	if err != nil {
		panic(err)
	}
	fmt.Println("live workers:", info.LiveWorkers(time.Now()))
	fmt.Println("hash is spec.Hash():", info.Hash == echo.Hash())
	// Output:
	// live workers: [worker-1]
	// hash is spec.Hash(): true
}

// A view is an in-memory copy of the registry: complete when Watch returns,
// then following every change.
func ExampleRegistry_Watch() {
	ctx := context.Background()
	rs, err := testserver.NewRedis()
	if err != nil {
		panic(err)
	}
	defer rs.Close()
	client := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer client.Close()
	reg, err := registry.New(registry.Config{Client: client})
	if err != nil {
		panic(err)
	}
	echo := windlass.Spec{Name: "echo", Description: "Echo text."}
	lease, err := reg.Advertise(ctx, registry.Advertisement{WorkerID: "worker-1", Specs: []windlass.Spec{echo}})
	if err != nil {
		panic(err)
	}

	view, err := reg.Watch(ctx)
	if err != nil {
		panic(err)
	}
	defer view.Close()
	info, asOf, _ := view.Tool("echo")
	fmt.Println(info.Spec.Name, "has a live worker:", info.HasLiveWorker(asOf))

	changed := view.Changed()
	if err := lease.Withdraw(ctx); err != nil {
		panic(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		panic("the view did not see the withdrawal")
	}
	info, asOf, _ = view.Tool("echo")
	fmt.Println(info.Spec.Name, "has a live worker:", info.HasLiveWorker(asOf))
	// Output:
	// echo has a live worker: true
	// echo has a live worker: false
}
