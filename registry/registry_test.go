package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func spec(name, desc string) windlass.Spec {
	return windlass.Spec{Name: name, Description: desc}
}

func newRegistry(t *testing.T, rs *testserver.Redis, ttl time.Duration) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Config{Client: rs.Client(t), TTL: ttl, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func advertise(t *testing.T, reg *registry.Registry, ad registry.Advertisement) *registry.Lease {
	t.Helper()
	l, err := reg.Advertise(t.Context(), ad)
	if err != nil {
		t.Fatalf("Advertise(%s): %v", ad.WorkerID, err)
	}
	t.Cleanup(func() { _ = l.Withdraw(context.Background()) })
	return l
}

// watch returns a view of reg, closed when the test ends.
func watch(t *testing.T, reg *registry.Registry) *registry.View {
	t.Helper()
	view, err := reg.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	return view
}

// liveIn returns the workers of tool live in view (nil for a tool it does
// not list).
func liveIn(view *registry.View, tool string) []string {
	info, asOf, ok := view.Tool(tool)
	if !ok {
		return nil
	}
	return info.LiveWorkers(asOf)
}

func TestAdvertiseLookupList(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, testserver.StartRedis(t), 0)
	echo, add := spec("echo", "Echo."), spec("add", "Add.")
	advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: []windlass.Spec{echo, add}})
	advertise(t, reg, registry.Advertisement{WorkerID: "w2", Specs: []windlass.Spec{echo}})

	info, err := reg.Lookup(t.Context(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	if info.Hash != echo.Hash() || info.Spec.Description != "Echo." || info.Spec.Timeout != windlass.DefaultTimeout {
		t.Errorf("echo = %+v", info)
	}
	if live := info.LiveWorkers(time.Now()); strings.Join(live, ",") != "w1,w2" {
		t.Errorf("live workers of echo = %v, want w1,w2", live)
	}
	list, err := reg.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Spec.Name != "add" || list[1].Spec.Name != "echo" {
		t.Errorf("List = %+v", list)
	}
	if _, err := reg.Lookup(t.Context(), "missing"); !errors.Is(err, registry.ErrToolNotFound) {
		t.Errorf("Lookup(missing) = %v, want ErrToolNotFound", err)
	}
}

func TestConflictAndRollingReplace(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, testserver.StartRedis(t), 0)
	v1, v2 := spec("search", "v1"), spec("search", "v2")
	advertise(t, reg, registry.Advertisement{WorkerID: "old-a", Specs: []windlass.Spec{v1}})
	advertise(t, reg, registry.Advertisement{WorkerID: "old-b", Specs: []windlass.Spec{v1}})

	_, err := reg.Advertise(t.Context(), registry.Advertisement{WorkerID: "new", Specs: []windlass.Spec{v2}})
	var conflict *registry.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("Advertise(differing spec) = %v, want *ConflictError", err)
	}
	if conflict.Tool != "search" || conflict.Hash != v2.Hash() || conflict.LiveHash != v1.Hash() || strings.Join(conflict.Workers, ",") != "old-a,old-b" {
		t.Errorf("conflict = %+v", conflict)
	}
	for _, s := range []string{"old-a", "old-b", v1.Hash(), v2.Hash(), "Replace"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if info, _ := reg.Lookup(t.Context(), "search"); info.Hash != v1.Hash() || len(info.Workers) != 2 {
		t.Errorf("a refused advertisement changed the registry: %+v", info)
	}

	advertise(t, reg, registry.Advertisement{WorkerID: "new", Specs: []windlass.Spec{v2}, Replace: true})
	info, _ := reg.Lookup(t.Context(), "search")
	if info.Hash != v2.Hash() || len(info.LiveWorkers(time.Now())) != 3 {
		t.Errorf("after replace: %+v", info)
	}
}

func TestWithdrawAndLapse(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	reg := newRegistry(t, rs, time.Second)
	view, err := reg.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	live := func() []string {
		info, asOf, ok := view.Tool("echo")
		if !ok {
			return nil
		}
		return info.LiveWorkers(asOf)
	}
	has := func(id string) bool { return strings.Contains(","+strings.Join(live(), ",")+",", ","+id+",") }

	graceful := advertise(t, reg, registry.Advertisement{WorkerID: "graceful", Specs: []windlass.Spec{spec("echo", "")}})
	took := fleettest.WaitFor(t, 2*time.Second, "a new worker seen by the view", func() bool { return has("graceful") })
	t.Logf("new worker seen after %s", took)

	if err := graceful.Withdraw(t.Context()); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, time.Second, "a withdrawn worker dropped", func() bool { return !has("graceful") })

	// A worker that dies never withdraws: its heartbeats stop. Its own
	// connection to Redis is closed right after it advertised, so every
	// renewal fails and the lease lapses after the TTL.
	deadClient := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	deadReg, err := registry.New(registry.Config{Client: deadClient, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dead := advertise(t, deadReg, registry.Advertisement{WorkerID: "dead", Specs: []windlass.Spec{spec("echo", "")}})
	fleettest.WaitFor(t, 2*time.Second, "the doomed worker seen", func() bool { return has("dead") })
	_ = deadClient.Close()
	diedAt := time.Now()
	took = fleettest.WaitFor(t, 2*time.Second, "a dead worker dropped", func() bool { return !has("dead") })
	if since := time.Since(diedAt); since > time.Second+500*time.Millisecond {
		t.Errorf("dead worker dropped %s after its last heartbeat, TTL is 1s", since)
	}
	t.Logf("dead worker dropped after %s", took)
	if _, err := dead.Status(); err == nil {
		t.Error("the dead lease reports no error")
	}

	// Heartbeats keep a lease alive past its TTL.
	kept := advertise(t, reg, registry.Advertisement{WorkerID: "kept", Specs: []windlass.Spec{spec("echo", "")}})
	fleettest.WaitFor(t, 2*time.Second, "kept seen", func() bool { return has("kept") })
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs: only heartbeats keep it
	if !has("kept") {
		t.Fatal("a heartbeating worker lapsed")
	}
	if renewed, err := kept.Status(); err != nil || time.Since(renewed) > time.Second {
		t.Errorf("lease status = %s ago, %v", time.Since(renewed), err)
	}
}

func TestRedisOutage(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t) // not persistent: a restart loses every key
	reg := newRegistry(t, rs, time.Second)
	view, err := reg.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	lease := advertise(t, reg, registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec("echo", "")}})
	live := func() bool {
		info, asOf, ok := view.Tool("echo")
		return ok && info.HasLiveWorker(asOf)
	}
	fleettest.WaitFor(t, 2*time.Second, "worker seen", live)

	rs.Kill()
	fleettest.WaitFor(t, 3*time.Second, "the view notices the outage", func() bool { return view.Staleness() > 500*time.Millisecond })
	time.Sleep(1500 * time.Millisecond) // past the TTL: the lease could not be renewed
	if !live() {
		t.Fatal("during the outage the view dropped a worker it last saw live")
	}
	if _, err := lease.Status(); err == nil {
		t.Error("the lease reports no error while Redis is down")
	}

	rs.Restart(t) // empty: the lease must re-advertise by itself
	fleettest.WaitFor(t, 5*time.Second, "the lease re-advertised", func() bool {
		info, err := reg.Lookup(t.Context(), "echo")
		return err == nil && info.HasLiveWorker(time.Now())
	})
	fleettest.WaitFor(t, 2*time.Second, "the view is fresh again", func() bool { return view.Staleness() < 500*time.Millisecond && live() })
}

func TestConfigAndAdvertisementErrors(t *testing.T) {
	t.Parallel()
	if _, err := registry.New(registry.Config{}); err == nil || !strings.Contains(err.Error(), "Client") {
		t.Errorf("New without a client: %v", err)
	}
	rs := testserver.StartRedis(t)
	if _, err := registry.New(registry.Config{Client: rs.Client(t), TTL: time.Second, HeartbeatInterval: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), "HeartbeatInterval") {
		t.Errorf("heartbeat longer than TTL: %v", err)
	}
	reg := newRegistry(t, rs, 0)
	tests := []struct {
		name string
		ad   registry.Advertisement
		want string
	}{
		{name: "no worker id", ad: registry.Advertisement{Specs: []windlass.Spec{spec("a", "")}}, want: "WorkerID"},
		{name: "no specs", ad: registry.Advertisement{WorkerID: "w"}, want: "Specs"},
		{name: "bad tool name", ad: registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec("a.b", "")}}, want: "a.b"},
		{name: "duplicate tool", ad: registry.Advertisement{WorkerID: "w", Specs: []windlass.Spec{spec("a", ""), spec("a", "")}}, want: "twice"},
	}
	for _, tt := range tests {
		if _, err := reg.Advertise(t.Context(), tt.ad); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one naming %q", tt.name, err, tt.want)
		}
	}
}

// TestViewKeepsRoutingAfterRedisLosesItsData restarts a Redis that keeps
// nothing on disk while a worker is live: the view keeps offering the tool
// (it never offers a tool Redis lost as dead) until the worker's next
// heartbeat re-advertises it, and drops it one TTL later when no worker
// comes back.
func TestViewKeepsRoutingAfterRedisLosesItsData(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t) // not persistent: a restart loses every key
	// A long heartbeat leaves a wide window between the restart and the
	// lease's re-advertisement.
	reg, err := registry.New(registry.Config{Client: rs.Client(t), TTL: 3 * time.Second, HeartbeatInterval: 2 * time.Second, ResyncInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	view, err := reg.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	stays := advertise(t, reg, registry.Advertisement{WorkerID: "stays", Specs: []windlass.Spec{spec("echo", "")}})
	gone, err := reg.Advertise(t.Context(), registry.Advertisement{WorkerID: "gone", Specs: []windlass.Spec{spec("add", "")}})
	if err != nil {
		t.Fatal(err)
	}
	live := func(name string) bool {
		info, asOf, ok := view.Tool(name)
		return ok && info.HasLiveWorker(asOf)
	}
	fleettest.WaitFor(t, 2*time.Second, "both tools seen", func() bool { return live("echo") && live("add") })

	restarted := time.Now()
	rs.Restart(t)
	// "gone" never heartbeats again: its process is lost with Redis's data.
	_ = gone.Withdraw(context.Background())
	back := time.Now()
	fleettest.WaitFor(t, 2*time.Second, "the view resynced against the empty Redis", func() bool {
		return view.Staleness() < time.Since(back)-10*time.Millisecond
	})
	empty, err := reg.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(empty) > 1 {
		t.Fatalf("Redis lists %d tools right after an empty restart; the test needs the window before the heartbeat", len(empty))
	}
	if !live("echo") || !live("add") {
		t.Fatal("the view dropped tools Redis lost while their workers were live: calls would be refused unknown_tool")
	}
	if names := toolNames(view); len(names) != 2 || names[0] != "add" || names[1] != "echo" {
		t.Errorf("view lists %v, want [add echo] sorted", names)
	}
	fleettest.WaitFor(t, 4*time.Second, "the live worker re-advertised", func() bool {
		info, err := reg.Lookup(t.Context(), "echo")
		return err == nil && info.HasLiveWorker(time.Now())
	})
	if _, err := stays.Status(); err != nil {
		t.Errorf("lease status after re-advertising: %v", err)
	}
	took := fleettest.WaitFor(t, 6*time.Second, "the tool nobody re-advertised dropped", func() bool {
		_, _, ok := view.Tool("add")
		return !ok
	})
	if held := time.Since(restarted); held < 2*time.Second {
		t.Errorf("the lost tool was dropped %s after the restart (polled %s); want about one TTL (3s)", held, took)
	}
	if !live("echo") {
		t.Error("the re-advertised tool is not live")
	}
}

func toolNames(v *registry.View) []string {
	tools, _ := v.Tools()
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Spec.Name
	}
	return names
}

func TestExecutionRateIsAdvertised(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	var logs testserver.Buffer
	reg, err := registry.New(registry.Config{Client: rs.Client(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	api, plain := spec("crm", "Calls the CRM."), spec("echo", "Echo.")
	rate := limits.PerSecond(5).WithBurst(2)
	advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: []windlass.Spec{api, plain}, Rates: map[string]limits.Rate{"crm": rate}})

	info, err := reg.Lookup(t.Context(), "crm")
	if err != nil {
		t.Fatal(err)
	}
	if info.Rate.String() != "5/s burst 2" || info.Hash != api.Hash() {
		t.Errorf("crm: rate %s, hash %s; want 5/s burst 2 and the spec's own hash %s", info.Rate, info.Hash, api.Hash())
	}
	if info, _ := reg.Lookup(t.Context(), "echo"); !info.Rate.IsZero() {
		t.Errorf("echo: rate %s, want none", info.Rate)
	}
	if strings.Contains(logs.String(), "differs") {
		t.Errorf("a warning for the first worker: %s", logs.String())
	}

	// A second worker of crm with another rate: served, warned of, shown.
	advertise(t, reg, registry.Advertisement{WorkerID: "w2", Specs: []windlass.Spec{api}, Rates: map[string]limits.Rate{"crm": limits.PerSecond(9)}})
	if info, _ := reg.Lookup(t.Context(), "crm"); info.Rate.String() != "9/s" || len(info.LiveWorkers(time.Now())) != 2 {
		t.Errorf("crm after w2: rate %s, live %v", info.Rate, info.LiveWorkers(time.Now()))
	}
	if got := logs.String(); !strings.Contains(got, "differs") || !strings.Contains(got, `live_rate="5/s burst 2"`) {
		t.Errorf("no warning naming the live rate: %s", got)
	}

	if _, err := reg.Advertise(t.Context(), registry.Advertisement{WorkerID: "w3", Specs: []windlass.Spec{api}, Rates: map[string]limits.Rate{"other": rate}}); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("a rate for a tool not advertised: %v", err)
	}
	if _, err := reg.Advertise(t.Context(), registry.Advertisement{WorkerID: "w3", Specs: []windlass.Spec{api}, Rates: map[string]limits.Rate{"crm": {Events: 1, Per: time.Millisecond}}}); err == nil || !strings.Contains(err.Error(), "period") {
		t.Errorf("a bad rate: %v", err)
	}
}
