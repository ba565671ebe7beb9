package testserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name the sentinels of a [RedisSentinel] monitor
// the master by.
const SentinelMasterName = "windlass"

// sentinelDownAfter is how long a master may be unreachable before a
// sentinel deems it down, and so how soon a killed master is failed over.
const sentinelDownAfter = time.Second

// sentinelCount is the number of sentinels of a RedisSentinel; a quorum is a
// majority of them.
const sentinelCount = 3

// RedisSentinel is a replicated Redis watched by Redis Sentinel: a master,
// one replica and three sentinels (quorum 2), each a redis-server child
// process on a free port of 127.0.0.1 with a data directory of its own. The
// data nodes keep no data on disk. Replication from master to replica is
// asynchronous, as in production: a write acknowledged by the master just
// before it dies may be missing on the replica that replaces it.
type RedisSentinel struct {
	nodes     []*Redis // the data nodes; nodes[0] is the first master
	sentinels []*Redis
}

// NewRedisSentinel starts a master, a replica of it and three sentinels
// monitoring it as [SentinelMasterName], and waits until the replica is in
// sync and every sentinel sees the master, the replica and the other two
// sentinels. The caller must call [RedisSentinel.Close]. Tests use
// [StartRedisSentinel].
func NewRedisSentinel() (*RedisSentinel, error) {
	s := &RedisSentinel{}
	fail := func(err error) (*RedisSentinel, error) {
		s.Close()
		return nil, err
	}
	// A replica's full sync starts at once, not after the default 5s wait
	// for more replicas to share it.
	data := []string{"--repl-diskless-sync-delay", "0"}
	master, err := newRedis(RedisOptions{}, "", data...)
	if err != nil {
		return fail(err)
	}
	s.nodes = append(s.nodes, master)
	host, port := splitAddr(master.Addr())
	replica, err := newRedis(RedisOptions{}, fmt.Sprintf("replicaof %s %s\n", host, port), data...)
	if err != nil {
		return fail(err)
	}
	s.nodes = append(s.nodes, replica)
	// The replica must be in sync before the sentinels start, so that their
	// first look at the master finds it.
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := poll(ctx, "the replica in sync", func(ctx context.Context) error {
		return checkReplica(ctx, replica, master.Addr())
	}); err != nil {
		return fail(err)
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]d\n"+
		"sentinel failover-timeout %[1]s %[6]d\n",
		SentinelMasterName, host, port, sentinelCount/2+1,
		sentinelDownAfter.Milliseconds(), (5 * time.Second).Milliseconds())
	for range sentinelCount {
		sn, err := newRedis(RedisOptions{}, conf, "--sentinel")
		if err != nil {
			return fail(err)
		}
		s.sentinels = append(s.sentinels, sn)
	}
	if err := s.WaitReady(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// StartRedisSentinel is [NewRedisSentinel] for a test: it calls tb.Fatalf on
// error and [RedisSentinel.Close] when the test ends.
func StartRedisSentinel(tb testing.TB) *RedisSentinel {
	tb.Helper()
	s, err := NewRedisSentinel()
	return started(tb, s, err)
}

// MasterName returns the name the sentinels know the master by,
// [SentinelMasterName].
func (s *RedisSentinel) MasterName() string { return SentinelMasterName }

// SentinelAddrs returns the sentinels' addresses, 127.0.0.1:PORT.
func (s *RedisSentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, r := range s.sentinels {
		addrs[i] = r.Addr()
	}
	return addrs
}

// Nodes returns the data nodes, the first master first, to Stop, Kill or
// Restart one.
func (s *RedisSentinel) Nodes() []*Redis { return slices.Clone(s.nodes) }

// Sentinel returns the i-th sentinel.
func (s *RedisSentinel) Sentinel(i int) *Redis { return s.sentinels[i] }

// URL returns the set's URL,
// redis+sentinel://SENTINEL1?addr=SENTINEL2&addr=SENTINEL3&master_name=NAME,
// in the form internal/redisurl parses.
func (s *RedisSentinel) URL() string {
	addrs := s.SentinelAddrs()
	q := []string{}
	for _, a := range addrs[1:] {
		q = append(q, "addr="+a)
	}
	q = append(q, "master_name="+SentinelMasterName)
	return "redis+sentinel://" + addrs[0] + "?" + strings.Join(q, "&")
}

// Client returns a go-redis failover client, which asks the sentinels for
// the master and follows it when it changes; closed when the test ends.
func (s *RedisSentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    SentinelMasterName,
		SentinelAddrs: s.SentinelAddrs(),
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the data node every sentinel currently names as the
// master. It fails if a sentinel cannot be asked or they disagree.
func (s *RedisSentinel) Master(ctx context.Context) (*Redis, error) {
	addr, err := s.agreedMaster(ctx)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	return s.node(addr)
}

// Failover makes the sentinels promote the replica (SENTINEL FAILOVER, which
// needs no agreement that the master is down), as in a planned switch, and
// waits until every sentinel names the new master and it reports
// role:master; it returns the new master. The old master becomes the new
// one's replica about ten seconds later (the sentinels reconfigure it at
// their next look); [RedisSentinel.WaitReady] waits for that.
func (s *RedisSentinel) Failover(ctx context.Context) (*Redis, error) {
	old, err := s.agreedMaster(ctx)
	if err != nil {
		return nil, fmt.Errorf("testserver: failover: %w", err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].Addr()})
	err = sc.Failover(ctx, SentinelMasterName).Err()
	_ = sc.Close()
	if err != nil {
		return nil, fmt.Errorf("testserver: SENTINEL FAILOVER %s: %w", SentinelMasterName, err)
	}
	return s.WaitNewMaster(ctx, old)
}

// WaitNewMaster waits until every running sentinel names a master other
// than the data node at old and that node reports role:master: after a
// Failover, or after the master was killed (sentinels take about a second
// to deem it down, then elect a leader and promote). It returns the new
// master.
func (s *RedisSentinel) WaitNewMaster(ctx context.Context, old string) (*Redis, error) {
	var master *Redis
	err := poll(ctx, "a master other than "+old, func(ctx context.Context) error {
		addr, err := s.agreedMaster(ctx)
		if err != nil {
			return err
		}
		if addr == old {
			return fmt.Errorf("the sentinels still name %s", old)
		}
		if master, err = s.node(addr); err != nil {
			return err
		}
		return checkRole(ctx, master, "master")
	})
	return master, err
}

// WaitReady waits until every sentinel agrees on the master, sees it and its
// replica up, and sees the other two sentinels; and the data nodes agree:
// the master reports role:master, the other node is its replica with the
// link up and the sync done. Every process must be running. It fails when
// ctx ends or after 30s.
func (s *RedisSentinel) WaitReady(ctx context.Context) error {
	return poll(ctx, "the Sentinel set ready", func(ctx context.Context) error {
		addr, err := s.agreedMaster(ctx)
		if err != nil {
			return err
		}
		master, err := s.node(addr)
		if err != nil {
			return err
		}
		if err := checkRole(ctx, master, "master"); err != nil {
			return err
		}
		for _, r := range s.nodes {
			if r != master {
				if err := checkReplica(ctx, r, addr); err != nil {
					return err
				}
			}
		}
		for _, sn := range s.sentinels {
			if err := checkSentinel(ctx, sn, addr, len(s.nodes)-1); err != nil {
				return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
			}
		}
		return nil
	})
}

// agreedMaster asks every running sentinel for the master's address and
// returns it if they agree.
func (s *RedisSentinel) agreedMaster(ctx context.Context) (string, error) {
	var addr string
	for _, sn := range s.sentinels {
		if !sn.running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(ctx, SentinelMasterName).Result()
		_ = sc.Close()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: get-master-addr-by-name: %w", sn.Addr(), err)
		}
		a := strings.Join(hp, ":")
		if addr != "" && a != addr {
			return "", fmt.Errorf("the sentinels disagree on the master: %s and %s", addr, a)
		}
		addr = a
	}
	if addr == "" {
		return "", errors.New("no sentinel is running")
	}
	return addr, nil
}

// node returns the data node at addr.
func (s *RedisSentinel) node(addr string) (*Redis, error) {
	for _, r := range s.nodes {
		if r.Addr() == addr {
			return r, nil
		}
	}
	return nil, fmt.Errorf("testserver: the sentinels name %s, which is no data node of the set", addr)
}

// Close kills every process of the set and removes their data directories.
// Close again does nothing.
func (s *RedisSentinel) Close() { _ = s.close() }

// close is Close, reporting the directories that could not be removed.
func (s *RedisSentinel) close() error {
	var errs []error
	// Sentinels first, so that none reacts to the data nodes going away.
	for _, r := range append(slices.Clone(s.sentinels), s.nodes...) {
		errs = append(errs, r.close())
	}
	return errors.Join(errs...)
}

// checkRole checks that the data node r reports role.
func checkRole(ctx context.Context, r *Redis, role string) error {
	f, err := replicationInfo(ctx, r)
	if err != nil {
		return err
	}
	if f["role"] != role {
		return fmt.Errorf("%s has role %s, want %s", r.Addr(), f["role"], role)
	}
	return nil
}

// checkReplica checks that the data node r is a replica of master with its
// link up and the initial sync done.
func checkReplica(ctx context.Context, r *Redis, master string) error {
	f, err := replicationInfo(ctx, r)
	if err != nil {
		return err
	}
	if got := f["master_host"] + ":" + f["master_port"]; f["role"] != "slave" || got != master ||
		f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
		return fmt.Errorf("%s: role %s of %s, link %s, sync in progress %s; want a replica of %s in sync",
			r.Addr(), f["role"], got, f["master_link_status"], f["master_sync_in_progress"], master)
	}
	return nil
}

// replicationInfo returns the fields of INFO replication of r.
func replicationInfo(ctx context.Context, r *Redis) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("%s: INFO replication: %w", r.Addr(), err)
	}
	return infoFields(info), nil
}

// checkSentinel checks that the sentinel sn sees the master at addr up with
// no failover under way, the other sentinels, and replicas replicas up. (Its
// view of a replica's link lags by up to ten seconds, its INFO period, so
// the link is checked on the replica itself.)
func checkSentinel(ctx context.Context, sn *Redis, addr string, replicas int) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
	defer sc.Close()
	m, err := sc.Master(ctx, SentinelMasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL MASTER: %w", err)
	}
	if got := m["ip"] + ":" + m["port"]; got != addr || m["flags"] != "master" ||
		m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
		return fmt.Errorf("master %s with flags %s and %s other sentinels; want %s, master, %d",
			got, m["flags"], m["num-other-sentinels"], addr, sentinelCount-1)
	}
	rs, err := sc.Replicas(ctx, SentinelMasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	up := 0
	for _, r := range rs {
		if r["flags"] == "slave" {
			up++
		}
	}
	if up != replicas {
		return fmt.Errorf("%d replicas up, want %d: %v", up, replicas, rs)
	}
	return nil
}
