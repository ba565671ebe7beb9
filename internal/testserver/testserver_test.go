package testserver_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestMain fails the run if a test leaves a goroutine behind, such as a
// server or client that was not shut down. No goroutine needs ignoring: a
// stopped nats-server and closed clients leave none.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctx(t *testing.T) context.Context { return ctxTimeout(t, 10*time.Second) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// pingFails checks that PING fails, within a short time: the client's dial
// and command retries would otherwise take a few seconds.
func pingFails(t *testing.T, c *redis.Client, after string) {
	t.Helper()
	if err := c.Ping(ctxTimeout(t, 300*time.Millisecond)).Err(); err == nil {
		t.Fatalf("PING succeeded after %s", after)
	}
}

// fetchOne fetches one message from the durable consumer and acks it.
func fetchOne(t *testing.T, js jetstream.JetStream, stream, durable string) jetstream.Msg {
	t.Helper()
	cons, err := js.Consumer(ctx(t), stream, durable)
	if err != nil {
		t.Fatalf("consumer %s: %v", durable, err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	msg, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("fetch returned no message: %v", batch.Error())
	}
	if err := msg.DoubleAck(ctx(t)); err != nil {
		t.Fatalf("ack: %v", err)
	}
	return msg
}

// setUpStream creates a stream on "orders.>" with a durable pull consumer
// and publishes one message.
func setUpStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	s, err := js.CreateStream(ctx(t), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := s.CreateOrUpdateConsumer(ctx(t), jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	if _, err := js.Publish(ctx(t), "orders.new", []byte("order 1")); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func TestNATSJetStream(t *testing.T) {
	t.Parallel()
	n := testserver.StartNATS(t)
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	setUpStream(t, js)
	if msg := fetchOne(t, js, "ORDERS", "worker"); string(msg.Data()) != "order 1" || msg.Subject() != "orders.new" {
		t.Fatalf("got %q on %s, want %q on orders.new", msg.Data(), msg.Subject(), "order 1")
	}
	cons, err := js.Consumer(ctx(t), "ORDERS", "worker")
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("after ack: %d pending acks, %d pending messages; want 0, 0", info.NumAckPending, info.NumPending)
	}
}

func TestNATSMaxPayload(t *testing.T) {
	t.Parallel()
	n := testserver.StartNATS(t, testserver.NATSOptions{MaxPayload: 1024})
	if got := n.Connect(t).MaxPayload(); got != 1024 {
		t.Fatalf("MaxPayload = %d, want 1024", got)
	}
}

func TestNATSRestart(t *testing.T) {
	t.Parallel()
	n := testserver.StartNATS(t)
	url, before := n.URL(), n.Server()
	reconnected := make(chan struct{}, 1)
	nc := n.Connect(t, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	setUpStream(t, js)

	n.Restart(t)
	if n.URL() != url || n.Server() == before {
		t.Fatalf("after Restart: URL %s (was %s), same server instance: %v", n.URL(), url, n.Server() == before)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatalf("client did not reconnect to %s within 10s (status %v)", url, nc.Status())
	}
	if got := nc.ConnectedUrl(); got != url {
		t.Fatalf("reconnected to %s, want %s", got, url)
	}
	s, err := js.Stream(ctx(t), "ORDERS")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if msgs := s.CachedInfo().State.Msgs; msgs != 1 {
		t.Fatalf("stream has %d messages after restart, want 1", msgs)
	}
	if msg := fetchOne(t, js, "ORDERS", "worker"); string(msg.Data()) != "order 1" {
		t.Fatalf("got %q after restart, want %q", msg.Data(), "order 1")
	}

	n.Stop()
	n.Stop() // idempotent
	if n.Server() != nil {
		t.Fatal("Server() is not nil after Stop")
	}
	n.Restart(t) // from stopped
	if _, err := js.Stream(ctx(t), "ORDERS"); err != nil {
		t.Fatalf("stream after Stop and Restart: %v", err)
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	c := testserver.StartRedis(t).Client(t)
	if err := c.HSet(ctx(t), "order:1", "state", "new").Err(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	if got, err := c.HGet(ctx(t), "order:1", "state").Result(); err != nil || got != "new" {
		t.Fatalf("HGET = %q, %v; want %q", got, err, "new")
	}
}

func TestRedisRestartPersist(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t, testserver.RedisOptions{Persist: true})
	addr := r.Addr()
	c := r.Client(t)
	if err := c.Set(ctx(t), "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	r.Stop() // idempotent
	pingFails(t, c, "Stop")
	r.Restart(t)
	if got, err := c.Get(ctx(t), "a").Result(); err != nil || got != "1" {
		t.Fatalf("after Stop and Restart: GET a = %q, %v; want %q", got, err, "1")
	}

	if err := c.Set(ctx(t), "b", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	pingFails(t, c, "Kill")
	r.Restart(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// appendfsync always: a write acknowledged before the crash is kept.
	if got, err := c.Get(ctx(t), "b").Result(); err != nil || got != "2" {
		t.Fatalf("after Kill and Restart: GET b = %q, %v; want %q", got, err, "2")
	}
	if r.Addr() != addr {
		t.Fatalf("Addr changed from %s to %s", addr, r.Addr())
	}
}

func TestRedisRestartEmpty(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	c := r.Client(t)
	if err := c.Set(ctx(t), "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Restart(t)
	if n, err := c.Exists(ctx(t), "a").Result(); err != nil || n != 0 {
		t.Fatalf("without Persist, EXISTS a after Restart = %d, %v; want 0", n, err)
	}
}

func TestRedisURL(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	if want := "redis://" + r.Addr() + "/0"; r.URL() != want {
		t.Fatalf("URL() = %s, want %s", r.URL(), want)
	}
}

func TestFreePorts(t *testing.T) {
	t.Parallel()
	n, r := testserver.StartNATS(t), testserver.StartRedis(t)
	u, err := url.Parse(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ addr, standard string }{{u.Host, "4222"}, {r.Addr(), "6379"}} {
		host, port, err := net.SplitHostPort(c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if host != "127.0.0.1" || port == c.standard {
			t.Errorf("server listens on %s; want 127.0.0.1 and a port other than the standard %s", c.addr, c.standard)
		}
	}
}

// fatalTB records the message of Fatalf, which ends the calling goroutine as
// testing.T's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Not parallel: t.Setenv changes PATH for the whole process, while the
// parallel tests wait.
func TestRedisNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testserver.StartRedis(tb)
		t.Error("StartRedis returned without redis-server on PATH")
	}()
	<-done
	if !strings.Contains(tb.msg, "apt-get install -y redis-server") {
		t.Fatalf("failure message %q does not say how to install redis-server", tb.msg)
	}
	r, err := testserver.NewRedis()
	if r != nil || !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Fatalf("NewRedis without redis-server on PATH = %v, %v; want an exec.ErrNotFound saying how to install it", r, err)
	}
}

// NewNATS and NewRedis need no testing.TB; Close stops the server, removes
// its directory, is idempotent, and keeps Restart from reviving it.
func TestNewClose(t *testing.T) {
	t.Parallel()
	n, err := testserver.NewNATS(testserver.NATSOptions{MaxPayload: 2048})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	if got := nc.MaxPayload(); got != 2048 {
		t.Errorf("MaxPayload = %d, want 2048", got)
	}
	nc.Close()
	storeDir := n.Server().JetStreamConfig().StoreDir

	r, err := testserver.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	var dataDir string
	if cfg, err := c.ConfigGet(ctx(t), "dir").Result(); err != nil || cfg["dir"] == "" {
		t.Fatalf("CONFIG GET dir = %v, %v", cfg, err)
	} else {
		dataDir = cfg["dir"]
	}

	for _, dir := range []string{storeDir, dataDir} {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("data directory %s before Close: %v", dir, err)
		}
	}

	n.Close()
	n.Close() // idempotent
	r.Close()
	r.Close()
	if n.Server() != nil {
		t.Error("NATS.Server() is not nil after Close")
	}
	pingFails(t, c, "Close")
	for _, dir := range []string{storeDir, dataDir} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Close: Stat = %v, want it removed", dir, err)
		}
	}
	for name, restart := range map[string]func(testing.TB){"NATS": n.Restart, "Redis": r.Restart} {
		tb := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			restart(tb)
			t.Errorf("%s.Restart after Close returned", name)
		}()
		<-done
		if !strings.Contains(tb.msg, "closed") {
			t.Errorf("%s.Restart after Close: failure message %q does not say it was closed", name, tb.msg)
		}
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	if _, err := testserver.NewNATS(testserver.NATSOptions{}, testserver.NATSOptions{}); err == nil || !strings.Contains(err.Error(), "at most one") {
		t.Errorf("NewNATS with two options: err = %v", err)
	}
	if _, err := testserver.NewRedis(testserver.RedisOptions{}, testserver.RedisOptions{}); err == nil || !strings.Contains(err.Error(), "at most one") {
		t.Errorf("NewRedis with two options: err = %v", err)
	}
}
