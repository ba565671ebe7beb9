package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// New serves a dispatcher over HTTP; any client that speaks HTTP and JSON
// calls the fleet's tools.
func ExampleNew() {
	ctx := context.Background()
	ns, _ := testserver.NewNATS()
	defer ns.Close()
	rs, err := testserver.NewRedis()
	if err != nil {
		panic(err)
	}
	defer rs.Close()
	nc, _ := nats.Connect(ns.URL())
	defer nc.Close()
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	reg, _ := registry.New(registry.Config{Client: rc})

	// A worker serving one tool.
	js, _ := jetstream.New(nc)
	w, _ := worker.New(worker.Config{JetStream: js, Registry: reg})
	_ = w.Register(windlass.MustFunc("add", func(ctx context.Context, in struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}) (float64, error) {
		return in.A + in.B, nil
	}))
	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()
	defer func() { stopWorker(); <-workerDone }()

	// The dispatcher and its HTTP API. Configure APIKeys in production.
	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, Conn: nc})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cat, _ := d.Catalog(ctx); len(cat) == 1 {
			break // the worker is advertised
		}
	}

	res, err := http.Post(srv.URL+"/v1/calls", "application/json", strings.NewReader(`{"tool":"add","arguments":{"a":1,"b":2}}`))
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, strings.Contains(string(body), `"content":"3"`))
	// Output: 200 true
}
