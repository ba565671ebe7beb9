package testserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterTimeout bounds how long a cluster, or a Sentinel set, may take to
// settle: all nodes agreeing on the slots, the sentinels on the master.
const clusterTimeout = 30 * time.Second

// clusterNodeTimeout is the cluster's node timeout: how long a node may be
// unreachable before the others mark it failing.
const clusterNodeTimeout = time.Second

// RedisCluster is a Redis Cluster of redis-server child processes, one per
// master, each on a free port of 127.0.0.1 and with a data directory of its
// own. The hash slots are split evenly between the masters; there are no
// replicas, so a stopped node makes the cluster fail until it is restarted.
// Nodes keep their cluster state (nodes.conf) across Restart, not their
// data.
type RedisCluster struct {
	nodes []*Redis
}

// NewRedisCluster starts a Redis Cluster of masters nodes (at least 1) and
// waits until every node reports cluster_state:ok and knows every other.
// The caller must call [RedisCluster.Close]. Tests use [StartRedisCluster].
func NewRedisCluster(masters int) (*RedisCluster, error) {
	if masters < 1 {
		return nil, fmt.Errorf("testserver: a Redis Cluster needs at least one master, got %d", masters)
	}
	c := &RedisCluster{}
	for range masters {
		r, err := newRedis(RedisOptions{}, "",
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout.Milliseconds())))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.create(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("testserver: create a Redis Cluster of %d masters: %w", masters, err)
	}
	if err := c.WaitOK(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartRedisCluster is [NewRedisCluster] for a test: it calls tb.Fatalf on
// error and [RedisCluster.Close] when the test ends.
func StartRedisCluster(tb testing.TB, masters int) *RedisCluster {
	tb.Helper()
	c, err := NewRedisCluster(masters)
	return started(tb, c, err)
}

// create gives each node a distinct config epoch and an even share of the
// slots, and makes the nodes meet, as `redis-cli --cluster create` does.
func (c *RedisCluster) create(ctx context.Context) error {
	n := len(c.nodes)
	for i, r := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: r.Addr()})
		first, last := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		if err == nil {
			err = cl.ClusterAddSlotsRange(ctx, first, last).Err()
		}
		if err == nil && i > 0 {
			host, port := splitAddr(c.nodes[0].Addr())
			err = cl.ClusterMeet(ctx, host, port).Err()
		}
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", r.Addr(), err)
		}
	}
	return nil
}

// WaitOK waits until every node reports cluster_state:ok, knows all the
// nodes and sees all the slots assigned: after NewRedisCluster, or after a
// node was restarted. It fails when ctx ends or after 30s.
func (c *RedisCluster) WaitOK(ctx context.Context) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
	}
	return c.waitAll(ctx, "cluster_state:ok on every node", func(ctx context.Context, cl *redis.Client) error {
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		got := infoFields(info)
		for k, v := range want {
			if got[k] != v {
				return fmt.Errorf("%s:%s, want %s", k, got[k], v)
			}
		}
		return nil
	})
}

// waitAll polls check on a client of every running node until it passes on
// all of them.
func (c *RedisCluster) waitAll(ctx context.Context, what string, check func(context.Context, *redis.Client) error) error {
	return poll(ctx, what, func(ctx context.Context) error {
		for _, r := range c.nodes {
			cl := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
			err := check(ctx, cl)
			_ = cl.Close()
			if err != nil {
				return fmt.Errorf("node %s: %w", r.Addr(), err)
			}
		}
		return nil
	})
}

// Addrs returns the nodes' addresses, 127.0.0.1:PORT, in the order of
// [RedisCluster.Node]. They stay the same across a node's Restart.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, r := range c.nodes {
		addrs[i] = r.Addr()
	}
	return addrs
}

// Node returns the i-th node, to Stop, Kill or Restart it. After a Restart,
// call [RedisCluster.WaitOK] before relying on the cluster.
func (c *RedisCluster) Node(i int) *Redis { return c.nodes[i] }

// URL returns the cluster's URL, redis+cluster://ADDR1?addr=ADDR2&addr=...,
// in the form internal/redisurl parses: every node as a seed address.
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()
	var q []string
	for _, a := range addrs[1:] {
		q = append(q, "addr="+a)
	}
	u := "redis+cluster://" + addrs[0]
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

// Client returns a go-redis cluster client seeded with every node, closed
// when the test ends.
func (c *RedisCluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Close kills every node and removes their data directories. Close again
// does nothing.
func (c *RedisCluster) Close() { _ = c.close() }

// close is Close, reporting the first directory that could not be removed.
func (c *RedisCluster) close() error {
	var errs []error
	for _, r := range c.nodes {
		errs = append(errs, r.close())
	}
	return errors.Join(errs...)
}

// poll calls check every 20ms until it returns nil, and fails with its last
// error when ctx ends or after clusterTimeout.
func poll(ctx context.Context, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: wait for %s: %w (last: %v)", what, context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

// infoFields parses the "key:value" lines of an INFO or CLUSTER INFO reply.
func infoFields(info string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// splitAddr splits 127.0.0.1:PORT; the address is one this package built.
func splitAddr(addr string) (host string, port string) {
	host, port, _ = strings.Cut(addr, ":")
	return host, port
}
