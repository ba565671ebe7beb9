package redisurl_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/internal/redisurl"
	"github.com/windlass-dev/windlass/internal/testserver"
)

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// requirePassword makes the servers ask for pw (they start without one).
func requirePassword(t *testing.T, pw string, servers ...*testserver.Redis) {
	t.Helper()
	for _, s := range servers {
		if err := s.Client(t).ConfigSet(ctx(t), "requirepass", pw).Err(); err != nil {
			t.Fatalf("CONFIG SET requirepass on %s: %v", s.Addr(), err)
		}
	}
}

// roundTrip writes and reads back keys that hash to many slots.
func roundTrip(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	for i := range 20 {
		k := fmt.Sprintf("key-%d", i)
		if err := c.Set(ctx(t), k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if got, err := c.Get(ctx(t), k).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, got, err, i)
		}
	}
}

// newClient is redisurl.New, failing the test on error; the client is
// closed when the test ends.
func newClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	c, err := redisurl.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestNewSingle(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	requirePassword(t, "s3cret", r)
	c := newClient(t, "redis://:s3cret@"+r.Addr()+"/3")
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("client is a %T, want *redis.Client", c)
	}
	roundTrip(t, c)
	if err := newClient(t, "redis://"+r.Addr()+"/3").Ping(ctx(t)).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v, want NOAUTH", err)
	}
}

// The cluster form reaches every node from one seed: keys of all slots go
// to their node.
func TestNewCluster(t *testing.T) {
	t.Parallel()
	rc := testserver.StartRedisCluster(t, 3)
	requirePassword(t, "s3cret", rc.Node(0), rc.Node(1), rc.Node(2))
	c := newClient(t, "redis+cluster://:s3cret@"+rc.Addrs()[0])
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("client is a %T, want *redis.ClusterClient", c)
	}
	roundTrip(t, c)
	for i := range 3 {
		nc := redis.NewClient(&redis.Options{Addr: rc.Addrs()[i], Password: "s3cret"})
		n, err := nc.DBSize(ctx(t)).Result()
		_ = nc.Close()
		if err != nil || n == 0 {
			t.Errorf("node %d holds %d keys (%v), want some", i, n, err)
		}
	}
}

// The sentinel form asks the sentinels for the master, authenticates to it
// with the password parameter, and follows it through a failover.
func TestNewSentinel(t *testing.T) {
	t.Parallel()
	s := testserver.StartRedisSentinel(t)
	c := newClient(t, s.URL())
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("client is a %T, want a failover *redis.Client", c)
	}
	roundTrip(t, c)
	if _, err := s.Failover(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx(t), "after", "failover", 0).Err(); err != nil {
		t.Fatalf("SET after the failover: %v", err)
	}

	// With a password on the data nodes, known to the sentinels too.
	nodes := s.Nodes()
	for _, n := range nodes {
		if err := n.Client(t).ConfigSet(ctx(t), "masterauth", "s3cret").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range len(s.SentinelAddrs()) {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel(i).Addr()})
		err := sc.Set(ctx(t), s.MasterName(), "auth-pass", "s3cret").Err()
		_ = sc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	requirePassword(t, "s3cret", nodes...)
	roundTrip(t, newClient(t, s.URL()+"&password=s3cret"))
	if err := newClient(t, s.URL()).Ping(ctx(t)).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the master's password: %v, want NOAUTH", err)
	}
}
