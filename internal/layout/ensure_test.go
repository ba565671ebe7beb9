package layout_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestEnsureStreamsWaitsForAFormingCluster starts two nodes of a
// three-node JetStream cluster: they elect a meta leader, but a stream of
// three replicas cannot be placed until the third joins — what every
// service of a deployment started with its NATS cluster meets. Ensuring
// the streams waits for the third node instead of failing at once.
func TestEnsureStreamsWaitsForAFormingCluster(t *testing.T) {
	c := newNATSCluster(t, 3)
	c.start(t, 0)
	c.start(t, 1)
	nc, err := nats.Connect(c.url(0) + "," + c.url(1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info := waitMetaLeader(t, js)

	cfg := layout.CallsConfig(layout.StreamOptions{Replicas: 3})
	done := make(chan error, 1)
	go func() { done <- layout.EnsureStreams(t.Context(), js, cfg) }()
	// The server counts the requests it refused: wait for a refusal of the
	// stream, so the third node joins only after one.
	for refused := false; !refused; {
		select {
		case err := <-done:
			t.Fatalf("EnsureStreams returned %v before the cluster could place three replicas", err)
		case <-time.After(20 * time.Millisecond):
		}
		now, err := js.AccountInfo(t.Context())
		refused = err == nil && now.API.Errors > info.API.Errors
	}
	c.start(t, 2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("EnsureStreams: %v, want the stream once the third node joined", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("EnsureStreams did not return within 40s of the third node joining")
	}
	s, err := js.Stream(t.Context(), cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 3 {
		t.Fatalf("replicas = %d, want 3", got)
	}
}

// TestEnsureStreamsRefusalIsNotRetried: a request the server refuses for
// good (three replicas on a server without a cluster) fails at once,
// naming the stream, instead of being made again for half a minute.
func TestEnsureStreamsRefusalIsNotRetried(t *testing.T) {
	ns := testserver.StartNATS(t)
	js, err := jetstream.New(ns.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = layout.EnsureStreams(ctx, js, layout.CallsConfig(layout.StreamOptions{Replicas: 3}))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || ctx.Err() != nil {
		t.Fatalf("EnsureStreams = %v (ctx %v), want the server's refusal at once", err, ctx.Err())
	}
}

func waitMetaLeader(t *testing.T, js jetstream.JetStream) *jetstream.AccountInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		info, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("no JetStream meta leader within 30s: %v", err)
		}
	}
}

// natsCluster is a JetStream cluster of in-process servers, each started
// when the test says.
type natsCluster struct {
	clientPorts, routePorts []int
}

func newNATSCluster(t *testing.T, n int) *natsCluster {
	c := &natsCluster{}
	for range n {
		c.clientPorts = append(c.clientPorts, freePort(t))
		c.routePorts = append(c.routePorts, freePort(t))
	}
	return c
}

func (c *natsCluster) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.clientPorts[i]) }

func (c *natsCluster) start(t *testing.T, i int) {
	t.Helper()
	o := &server.Options{ServerName: fmt.Sprintf("node-%d", i+1), Host: "127.0.0.1", Port: c.clientPorts[i],
		JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	o.Cluster.Name = "forming"
	o.Cluster.Host = "127.0.0.1"
	o.Cluster.Port = c.routePorts[i]
	for j, p := range c.routePorts {
		if j != i {
			o.Routes = append(o.Routes, server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d", p))...)
		}
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("node %d not ready within 10s", i+1)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
