package testserver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// A three-master cluster spreads keys over every node, refuses a command
// whose keys hash to different slots (so it is a real cluster), and comes
// back after a node is killed and restarted.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	rc := testserver.StartRedisCluster(t, 3)
	c := rc.Client(t)
	for i := range 60 {
		if err := c.Set(ctx(t), fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET k%d: %v", i, err)
		}
	}
	for i, addr := range rc.Addrs() {
		n, err := rc.Node(i).Client(t).DBSize(ctx(t)).Result()
		if err != nil || n == 0 {
			t.Errorf("node %s holds %d keys (%v); want some of the 60", addr, n, err)
		}
	}
	if err := c.MSet(ctx(t), "k1", "a", "k2", "b").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET over two slots: err = %v, want CROSSSLOT", err)
	}

	rc.Node(1).Kill()
	rc.Node(1).Restart(t)
	if err := rc.WaitOK(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if err := c.Set(ctx(t), fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET k%d after a node's restart: %v", i, err)
		}
	}
}

func TestRedisClusterURL(t *testing.T) {
	t.Parallel()
	rc := testserver.StartRedisCluster(t, 2)
	addrs := rc.Addrs()
	if want := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1]; rc.URL() != want {
		t.Fatalf("URL() = %s, want %s", rc.URL(), want)
	}
}

// A Sentinel set replicates, names its master, fails over on demand and
// after the master is killed, and its failover client follows the master.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	s := testserver.StartRedisSentinel(t)
	c := s.Client(t)
	if err := c.Set(ctx(t), "a", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	first, err := s.Master(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if first != s.Nodes()[0] {
		t.Fatalf("master is %s, want the first node %s", first.Addr(), s.Nodes()[0].Addr())
	}
	if n, err := first.Client(t).Wait(ctx(t), 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica to acknowledge", n, err)
	}

	second, err := s.Failover(ctxTimeout(t, 40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("Failover kept %s as master", first.Addr())
	}
	if got, err := c.Get(ctx(t), "a").Result(); err != nil || got != "1" {
		t.Fatalf("GET a after Failover = %q, %v; want 1 from the promoted replica", got, err)
	}
	// The old master must be the new one's replica before it can replace it.
	if err := s.WaitReady(ctxTimeout(t, 40*time.Second)); err != nil {
		t.Fatal(err)
	}

	second.Kill()
	third, err := s.WaitNewMaster(ctxTimeout(t, 40*time.Second), second.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if third != first {
		t.Fatalf("after killing %s the master is %s, want %s", second.Addr(), third.Addr(), first.Addr())
	}
	if err := c.Set(ctxTimeout(t, 20*time.Second), "b", "2", 0).Err(); err != nil {
		t.Fatalf("SET after the master was killed: %v", err)
	}
	second.Restart(t)
	if err := s.WaitReady(ctxTimeout(t, 40*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestRedisSentinelURL(t *testing.T) {
	t.Parallel()
	s := testserver.StartRedisSentinel(t)
	a := s.SentinelAddrs()
	if len(a) != 3 || slices.Contains(a, "") {
		t.Fatalf("SentinelAddrs() = %v, want three", a)
	}
	want := "redis+sentinel://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2] + "&master_name=" + s.MasterName()
	if s.URL() != want {
		t.Fatalf("URL() = %s, want %s", s.URL(), want)
	}
}
