package registry_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// commandCalls returns the calls of each command the server has run, as
// INFO commandstats counts them (commands run by scripts included).
func commandCalls(t *testing.T, c redis.UniversalClient) map[string]int {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return calls
}

// viewReads are the commands only a view issues: its check (get, zrange
// of the lease index) and its full read (smembers, then hgetall and
// zrange per tool). Workers' scripts call zrange only on a conflict.
var viewReads = []string{"get", "zrange", "smembers", "hgetall"}

func diffCalls(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for _, c := range viewReads {
		d[c] = after[c] - before[c]
	}
	return d
}

// TestViewFollowsChangesByTheVersion: a new tool, a changed spec, a
// withdrawn worker and a lapsed lease are each seen by a view within its
// check interval, and while nothing changes (a live worker renewing its
// lease past several TTLs) the view only checks: no tool is reread.
func TestViewFollowsChangesByTheVersion(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	client := rs.Client(t)
	const check = 300 * time.Millisecond
	// Seen within the check interval; the slack absorbs a loaded machine.
	const within = check + 700*time.Millisecond
	reg, err := registry.New(registry.Config{Client: client, TTL: time.Second, ResyncInterval: check, FullResyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	view := watch(t, reg)
	live := func(tool string) []string { return liveIn(view, tool) }

	v1, v2 := spec("echo", "v1"), spec("echo", "v2")
	advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: []windlass.Spec{v1}})
	took := fleettest.WaitFor(t, within, "a new tool seen", func() bool { return slices.Equal(live("echo"), []string{"w1"}) })
	t.Logf("new tool seen after %s", took)

	w2 := advertise(t, reg, registry.Advertisement{WorkerID: "w2", Specs: []windlass.Spec{v2}, Replace: true})
	took = fleettest.WaitFor(t, within, "a changed spec seen", func() bool {
		info, _, _ := view.Tool("echo")
		return info.Hash == v2.Hash() && len(live("echo")) == 2
	})
	t.Logf("changed spec seen after %s", took)

	if err := w2.Withdraw(t.Context()); err != nil {
		t.Fatal(err)
	}
	took = fleettest.WaitFor(t, within, "a withdrawn worker seen", func() bool { return slices.Equal(live("echo"), []string{"w1"}) })
	t.Logf("withdrawal seen after %s", took)

	// A worker that dies: its connection closes, no renewal comes.
	deadClient := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	deadReg, err := registry.New(registry.Config{Client: deadClient, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dead := advertise(t, deadReg, registry.Advertisement{WorkerID: "dead", Specs: []windlass.Spec{spec("add", "")}})
	fleettest.WaitFor(t, within, "the doomed worker seen", func() bool { return len(live("add")) == 1 })
	_ = deadClient.Close()
	renewed, _ := dead.Status()
	expires := renewed.Add(time.Second)
	fleettest.WaitFor(t, 2*time.Second, "a lapsed lease seen", func() bool { return len(live("add")) == 0 })
	if late := time.Since(expires); late > within {
		t.Errorf("a lapsed lease was seen %s after it lapsed; the check interval is %s", late, check)
	}
	t.Logf("lapsed lease seen %s after it lapsed", time.Since(expires))

	// Nothing changes: w1 renews its lease every TTL/3 for 2.5 TTLs.
	before := commandCalls(t, client)
	start := time.Now()
	time.Sleep(2500 * time.Millisecond) // a window of quiet, not a wait for an event
	after := commandCalls(t, client)
	elapsed := time.Since(start)
	d := diffCalls(before, after)
	t.Logf("commands in %s without a change: %v", elapsed.Round(time.Millisecond), d)
	if d["smembers"] != 0 || d["hgetall"] != 0 {
		t.Errorf("the view reread tools while nothing changed: %v", d)
	}
	if checks := int(elapsed / check); d["get"] < checks/2 {
		t.Errorf("the view checked the version %d times in %s; want about %d", d["get"], elapsed, checks)
	}
	if got := live("echo"); !slices.Equal(got, []string{"w1"}) {
		t.Errorf("live workers of echo after 2.5 TTLs of renewals = %v, want [w1]: a view must see renewals without rereading", got)
	}
}

// TestViewRedisCommandsAt100Tools measures the Redis commands a second
// one view issues (the dispatcher's cost) with 100 tools, each served by
// its own worker, at the default check interval. It logs the figure
// (README, "Registry reads"); it asserts nothing about timing.
func TestViewRedisCommandsAt100Tools(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 6 s measurement")
	}
	rs := testserver.StartRedis(t)
	client := rs.Client(t)
	reg, err := registry.New(registry.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		name := fmt.Sprintf("tool_%03d", i)
		advertise(t, reg, registry.Advertisement{WorkerID: "w-" + name, Specs: []windlass.Spec{spec(name, "")}})
	}
	view := watch(t, reg)
	if tools, _ := view.Tools(); len(tools) != 100 {
		t.Fatalf("view has %d tools, want 100", len(tools))
	}
	before := commandCalls(t, client)
	start := time.Now()
	time.Sleep(6 * time.Second) // the measurement window
	after := commandCalls(t, client)
	elapsed := time.Since(start).Seconds()
	d := diffCalls(before, after)
	total := 0
	for _, n := range d {
		total += n
	}
	t.Logf("one view, 100 tools, 100 workers renewing their leases: %.1f Redis commands/s (%v over %.1fs)", float64(total)/elapsed, d, elapsed)
}
