package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// The fault suite: real NATS and Redis, workers as separate processes, a
// dispatcher under closed-loop load while a fault strikes. Each scenario
// runs a baseline load without the fault first, then the same load with
// it, and reports calls submitted, answered, lost, duplicated to callers,
// executions, and the p99 delay the fault added (fault p99 − baseline p99).
//
// `make test` runs the short version; WINDLASS_FAULT_LONG=1 runs the long
// one (5,000 calls a scenario): `make faults`.

// faultLongEnv selects the long version of the fault suite.
const faultLongEnv = "WINDLASS_FAULT_LONG"

// faultScale sizes a scenario.
type faultScale struct {
	baseline, calls, inFlight int
	workMS                    int // each call's work
}

func faultSize() faultScale {
	if os.Getenv(faultLongEnv) != "" {
		return faultScale{baseline: 1000, calls: 5000, inFlight: 16, workMS: 100}
	}
	return faultScale{baseline: 200, calls: 800, inFlight: 16, workMS: 100}
}

// faultAckWait is the workers' ack wait: a killed worker's calls are
// redelivered this long after its last in-progress signal. It is not the
// kill period (2 s): with both equal, a redelivered call would be running
// at the very moment of the next kill, again and again, until its
// deliveries ran out (seen: worker_lost after 5 kills of the same call).
const faultAckWait = 1500 * time.Millisecond

// faultFleet is a fleet whose workers are processes.
type faultFleet struct {
	t     *testing.T
	fleet *fleettest.Fleet // its Registry is the test's own view of the registry
	dir   string
	bin   string

	mu      sync.Mutex
	next    int
	workers map[string]*faultProc
}

// faultProc is one worker process.
type faultProc struct {
	id     string
	cmd    *exec.Cmd
	logf   string
	exited chan struct{}
}

func newFaultFleet(t *testing.T, workers int) *faultFleet {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ff := &faultFleet{t: t, dir: t.TempDir(), bin: bin, workers: map[string]*faultProc{},
		fleet: fleettest.New(t, fleettest.WithRegistryTTL(3*time.Second), fleettest.WithResyncInterval(200*time.Millisecond))}
	t.Cleanup(ff.stopAll)
	for range workers {
		ff.startWorker()
	}
	return ff
}

func (ff *faultFleet) execLog() string { return filepath.Join(ff.dir, "executions.log") }

// startWorker starts a worker process and waits until it is advertised.
func (ff *faultFleet) startWorker() string {
	ff.t.Helper()
	ff.mu.Lock()
	ff.next++
	id := fmt.Sprintf("fw%d", ff.next)
	ff.mu.Unlock()
	p := &faultProc{id: id, logf: filepath.Join(ff.dir, id+".log"), exited: make(chan struct{})}
	out, err := os.Create(p.logf)
	if err != nil {
		ff.t.Fatal(err)
	}
	p.cmd = exec.Command(ff.bin, "-test.run=^$")
	p.cmd.Env = append(os.Environ(),
		faultWorkerEnv+"="+id, faultNATSEnv+"="+ff.fleet.NATS.URL(), faultRedisEnv+"="+ff.fleet.Redis.Addr(),
		faultExecLogEnv+"="+ff.execLog(), faultAckWaitEnv+"="+faultAckWait.String(),
		faultTTLEnv+"="+ff.fleet.Registry().TTL().String())
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		ff.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); out.Close(); close(p.exited) }()
	ff.mu.Lock()
	ff.workers[id] = p
	ff.mu.Unlock()
	fleettest.WaitFor(ff.t, 30*time.Second, "worker process "+id+" advertised", func() bool {
		select {
		case <-p.exited:
			ff.t.Fatalf("worker process %s exited at start:\n%s", id, ff.workerLog(id))
		default:
		}
		info, err := ff.fleet.Registry().Lookup(context.Background(), "work")
		return err == nil && slices.Contains(info.LiveWorkers(time.Now()), id)
	})
	return id
}

func (ff *faultFleet) workerLog(id string) string {
	b, _ := os.ReadFile(filepath.Join(ff.dir, id+".log"))
	return string(b)
}

// live returns the ids of the worker processes that run.
func (ff *faultFleet) live() []string {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	var ids []string
	for id, p := range ff.workers {
		select {
		case <-p.exited:
		default:
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// signal sends sig to a worker process; SIGKILL also waits for its end.
func (ff *faultFleet) signal(id string, sig syscall.Signal) {
	ff.t.Helper()
	ff.mu.Lock()
	p := ff.workers[id]
	ff.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		ff.t.Fatalf("signal %v to worker %s: %v", sig, id, err)
	}
	if sig == syscall.SIGKILL {
		<-p.exited
	}
}

// stop ends a worker process with SIGTERM (drain) and waits for it.
func (ff *faultFleet) stop(id string) {
	ff.mu.Lock()
	p := ff.workers[id]
	ff.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it is paused
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (ff *faultFleet) stopAll() {
	for _, id := range ff.live() {
		ff.stop(id)
	}
}

// executions reads the execution log: finished executions per call id.
func (ff *faultFleet) executions() map[string]int { return ff.execLines("done") }

// execLines counts the execution log's lines of one kind (start, done) by
// call id.
func (ff *faultFleet) execLines(kind string) map[string]int {
	ff.t.Helper()
	f, err := os.Open(ff.execLog())
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		ff.t.Fatal(err)
	}
	defer f.Close()
	runs := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 4 && fields[0] == kind {
			runs[fields[1]]++
		}
	}
	if err := sc.Err(); err != nil {
		ff.t.Fatal(err)
	}
	return runs
}

// execution is one start of a tool in the execution log: its attempt and
// the worker process that ran it.
type execution struct {
	attempt int
	worker  string
}

// starts reads the execution log's starts of one call, in the order they
// were logged.
func (ff *faultFleet) starts(callID string) []execution {
	ff.t.Helper()
	data, err := os.ReadFile(ff.execLog())
	if err != nil && !os.IsNotExist(err) {
		ff.t.Fatal(err)
	}
	var runs []execution
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) != 4 || fields[0] != "start" || fields[1] != callID {
			continue
		}
		attempt, err := strconv.Atoi(fields[2])
		if err != nil {
			ff.t.Fatalf("execution log line %q: %v", line, err)
		}
		runs = append(runs, execution{attempt: attempt, worker: fields[3]})
	}
	return runs
}

// dispatcher returns a dispatcher on its own connection, and a counter of
// the answers that reach its results subject, by call id: more than one is
// a second execution's answer, dropped.
func (ff *faultFleet) dispatcher() (*dispatcher.Dispatcher, *answerCounter) {
	ff.t.Helper()
	d := ff.fleet.Dispatcher(dispatcher.Config{})
	ac := &answerCounter{n: map[string]int{}}
	sub, err := ff.fleet.Conn().Subscribe(layout.ResultInbox(d.ID()), ac.add)
	if err != nil {
		ff.t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	return d, ac
}

// waitQueueEmpty waits until the calls stream holds no message: every call
// was acked or terminated, none left behind.
func (ff *faultFleet) waitQueueEmpty(within time.Duration) {
	ff.t.Helper()
	js := ff.fleet.JetStream()
	var left uint64
	empty := func() bool {
		s, err := js.Stream(ff.t.Context(), layout.CallsStream)
		if err != nil {
			return false
		}
		info, err := s.Info(ff.t.Context())
		if err == nil {
			left = info.State.Msgs
		}
		return err == nil && info.State.Msgs == 0
	}
	for deadline := time.Now().Add(within); !empty(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			ff.t.Fatalf("the work queue did not empty within %s: %d calls left\n%s", within, left, ff.queueLeft(js))
		}
	}
}

// queueLeft says what is left in the calls stream and where its consumers
// stand: which call, on which subject, stored when, and each consumer's
// ack floor and pending counts — what tells a message a consumer will
// still deliver from one it has passed.
func (ff *faultFleet) queueLeft(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, layout.CallsStream)
	if err != nil {
		return err.Error()
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq < info.State.FirstSeq+20; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted: a work queue's interior gap
		}
		var call windlass.ToolCall
		_ = json.Unmarshal(m.Data, &call)
		fmt.Fprintf(&b, "  seq %d %s call %s attempt %d stored %s (%s ago)\n", seq, m.Subject, call.ID, call.Attempt, m.Time.Format(time.RFC3339Nano), time.Since(m.Time).Round(time.Millisecond))
	}
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		c, err := s.Consumer(ctx, name)
		if err != nil {
			continue
		}
		ci, err := c.Info(ctx)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "  consumer %s: ack floor %d, delivered %d, pending %d, ack pending %d, redelivered %d\n",
			name, ci.AckFloor.Stream, ci.Delivered.Stream, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	}
	return b.String()
}

// answerCounter counts the answers published to a dispatcher, by call id.
type answerCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *answerCounter) add(m *nats.Msg) {
	var r windlass.ToolResult
	if json.Unmarshal(m.Data, &r) != nil {
		return
	}
	a.mu.Lock()
	a.n[r.CallID]++
	a.mu.Unlock()
}

func (a *answerCounter) extra() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	extra := 0
	for _, n := range a.n {
		extra += max(0, n-1)
	}
	return extra
}

// callRecord is what one caller saw of one call.
type callRecord struct {
	id      string
	result  windlass.ToolResult
	latency time.Duration // from the first submit to the answer
	submits int           // >1: the fleet could not accept it at first (NATS down) and it was resubmitted with its id
}

// faultCallTimeout is each call's deadline: far beyond any delay a fault
// adds, so an unanswered call is lost, not late.
const faultCallTimeout = 90 * time.Second

// runLoad makes n calls of the work tool, inFlight at a time, each with its
// own id, and resubmits with the same id a call the fleet could not accept
// (code unavailable), as an agent backend would. done counts finished calls.
func runLoad(ctx context.Context, d *dispatcher.Dispatcher, prefix string, sc faultScale, n int, done *atomic.Int64) []callRecord {
	recs := make([]callRecord, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range sc.inFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				rec := &recs[i]
				rec.id = fmt.Sprintf("%s-%05d", prefix, i)
				start := time.Now()
				for {
					rec.submits++
					r, _ := d.Call(ctx, "work", workArgs{MS: sc.workMS}, dispatcher.WithCallID(rec.id), dispatcher.WithTimeout(faultCallTimeout))
					rec.result = r
					if r.Code() == windlass.CodeUnavailable && time.Since(start) < faultCallTimeout && ctx.Err() == nil {
						time.Sleep(100 * time.Millisecond) // the fleet is unreachable: back off, then resubmit by id
						continue
					}
					break
				}
				rec.latency = time.Since(start)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return recs
}

// faultReport is one scenario's figures.
type faultReport struct {
	Scenario     string
	Faults       int
	Submitted    int
	Answered     int
	Refused      int // refused before acceptance (unknown_tool, no_worker): the fleet turned the call away
	Lost         int // accepted, and no answer reached the caller by its deadline
	Duplicated   int // callers whose answer differs from the call's recorded first answer
	ErrorAnswers int // answered with an error result (worker_lost, ...)
	Started      int // executions of the tool that started (a killed worker's among them)
	Executions   int // executions of the tool that finished
	Reexecuted   int // finished executions beyond the first of a call
	ExtraAnswers int // answers beyond the first published for a call (dropped)
	Resubmits    int // submits repeated with the same id because the fleet could not accept
	BaseP50      time.Duration
	BaseP99      time.Duration
	FaultP50     time.Duration
	FaultP99     time.Duration
	AddedP99     time.Duration
	FaultMax     time.Duration
}

func (r faultReport) String() string {
	return fmt.Sprintf("%s: faults=%d submitted=%d answered=%d lost=%d duplicated=%d refused=%d error_answers=%d executions started=%d finished=%d reexecuted=%d extra_answers_dropped=%d resubmits=%d | p50 %s→%s, p99 %s→%s (added %s), max %s",
		r.Scenario, r.Faults, r.Submitted, r.Answered, r.Lost, r.Duplicated, r.Refused, r.ErrorAnswers, r.Started, r.Executions, r.Reexecuted, r.ExtraAnswers, r.Resubmits,
		r.BaseP50.Round(time.Millisecond), r.FaultP50.Round(time.Millisecond), r.BaseP99.Round(time.Millisecond), r.FaultP99.Round(time.Millisecond), r.AddedP99.Round(time.Millisecond), r.FaultMax.Round(time.Millisecond))
}

func percentiles(recs []callRecord) (p50, p99, maxLat time.Duration) {
	lat := make([]time.Duration, len(recs))
	for i, r := range recs {
		lat[i] = r.latency
	}
	slices.Sort(lat)
	n := len(lat)
	return lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
}

// report checks every call of the fault run against the results stream and
// the execution log, logs the figures, and fails the test on a lost or
// duplicated call. Calls of the baseline run are checked the same way.
func (ff *faultFleet) report(scenario string, faults int, d *dispatcher.Dispatcher, ac *answerCounter, base, fault []callRecord) faultReport {
	t := ff.t
	t.Helper()
	rep := faultReport{Scenario: scenario, Faults: faults, Submitted: len(fault), ExtraAnswers: ac.extra()}
	rep.BaseP50, rep.BaseP99, _ = percentiles(base)
	rep.FaultP50, rep.FaultP99, rep.FaultMax = percentiles(fault)
	rep.AddedP99 = rep.FaultP99 - rep.BaseP99

	// An execution may be recorded a moment after its answer: wait until
	// every answered call's execution is in the log.
	var runs map[string]int
	fleettest.WaitFor(t, 20*time.Second, "every answered call's execution logged", func() bool {
		runs = ff.executions()
		for _, rec := range slices.Concat(base, fault) {
			if !rec.result.IsError && runs[rec.id] == 0 {
				return false
			}
		}
		return true
	})
	started := ff.execLines("start")
	for _, rec := range slices.Concat(base, fault) {
		inFault := strings.HasPrefix(rec.id, "fault-")
		count := func(p *int) {
			if inFault {
				*p++
			}
		}
		if inFault {
			rep.Started += started[rec.id]
			rep.Executions += runs[rec.id]
			rep.Reexecuted += max(0, runs[rec.id]-1)
			rep.Resubmits += rec.submits - 1
		}
		r := rec.result
		switch {
		case r.Code() == windlass.CodeUnknownTool || r.Code() == windlass.CodeNoWorker || r.Code() == windlass.CodeUnavailable:
			count(&rep.Refused)
			t.Errorf("%s: call %s refused: %s", scenario, rec.id, r.Content)
			continue
		case r.Code() == windlass.CodeTimeout && r.Worker == "":
			// The dispatcher gave up waiting: lost, even if an answer
			// was stored later.
			count(&rep.Lost)
			t.Errorf("%s: call %s lost: %s", scenario, rec.id, r.Content)
			continue
		}
		count(&rep.Answered)
		if r.IsError {
			count(&rep.ErrorAnswers)
			t.Errorf("%s: call %s answered with an error: %s", scenario, rec.id, r.Content)
		}
		// The caller's answer must be the call's one recorded answer.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		stored, err := d.Result(ctx, rec.id)
		for err != nil && ctx.Err() == nil { // the stream stores an answer a moment after live delivery
			time.Sleep(20 * time.Millisecond)
			stored, err = d.Result(ctx, rec.id)
		}
		cancel()
		if err != nil || stored.Worker != r.Worker || stored.Attempt != r.Attempt || stored.Content != r.Content {
			count(&rep.Duplicated)
			t.Errorf("%s: call %s: the caller got %q from %s (attempt %d) but the recorded answer is %q from %s (attempt %d), err %v",
				scenario, rec.id, r.Content, r.Worker, r.Attempt, stored.Content, stored.Worker, stored.Attempt, err)
		}
	}
	ff.waitQueueEmpty(30 * time.Second) // nothing stays behind in the work queue
	t.Logf("FAULT %s", rep)
	if out := os.Getenv("WINDLASS_FAULT_REPORT"); out != "" {
		if f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_ = json.NewEncoder(f).Encode(rep)
			f.Close()
		}
	}
	return rep
}

// faultRun runs the baseline load, then the fault load with inject called
// from the test goroutine each time 'every' passes while the load runs
// (or, with every zero, once at each of the given fractions of the calls).
func (ff *faultFleet) faultRun(d *dispatcher.Dispatcher, sc faultScale, every time.Duration, at []float64, inject func()) (base, fault []callRecord, faults int) {
	t := ff.t
	t.Helper()
	ctx := t.Context()
	var baseDone, faultDone atomic.Int64
	base = runLoad(ctx, d, "base", sc, sc.baseline, &baseDone)

	finished := make(chan []callRecord, 1)
	go func() { finished <- runLoad(ctx, d, "fault", sc, sc.calls, &faultDone) }()
	tick := time.NewTicker(max(every, 20*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case fault = <-finished:
			return base, fault, faults
		case <-tick.C:
		}
		switch {
		case every > 0:
			inject()
			faults++
		case faults < len(at) && float64(faultDone.Load()) >= at[faults]*float64(sc.calls):
			inject()
			faults++
		}
	}
}

// TestFaultWorkersKilled kills a worker process with SIGKILL every 2 s under
// load and starts a replacement: every call is answered once, by the work
// of a live worker; the killed workers' calls are redelivered after the ack
// wait.
func TestFaultWorkersKilled(t *testing.T) {
	sc := faultSize()
	ff := newFaultFleet(t, 3)
	d, ac := ff.dispatcher()
	waitLive(t, d, "work", 3)
	base, fault, kills := ff.faultRun(d, sc, 2*time.Second, nil, func() {
		live := ff.live()
		victim := live[rand.IntN(len(live))]
		ff.signal(victim, syscall.SIGKILL)
		ff.startWorker()
	})
	rep := ff.report("worker SIGKILLed every 2s", kills, d, ac, base, fault)
	if kills < 2 {
		t.Errorf("only %d workers were killed during the load; the scenario needs at least 2", kills)
	}
	if rep.Lost != 0 || rep.Duplicated != 0 {
		t.Errorf("lost %d, duplicated %d; both must be 0", rep.Lost, rep.Duplicated)
	}
}

// faultOutage is how long a server stays down in the restart scenarios.
const faultOutage = time.Second

// TestFaultNATSRestarted stops the NATS server (JetStream on file storage)
// in the middle of the load and starts it again on the same store a second
// later: workers and the dispatcher reconnect on their own, calls the fleet
// could not accept meanwhile are resubmitted by id, and no accepted call is
// lost.
func TestFaultNATSRestarted(t *testing.T) {
	sc := faultSize()
	ff := newFaultFleet(t, 3)
	d, ac := ff.dispatcher()
	waitLive(t, d, "work", 3)
	base, fault, restarts := ff.faultRun(d, sc, 0, []float64{0.3, 0.65}, func() {
		ff.fleet.NATS.Stop()
		time.Sleep(faultOutage) // the outage itself, not a wait for an event
		ff.fleet.NATS.Restart(t)
	})
	rep := ff.report("NATS restarted", restarts, d, ac, base, fault)
	if restarts != 2 {
		t.Errorf("NATS was restarted %d times during the load, want 2", restarts)
	}
	if rep.Lost != 0 || rep.Duplicated != 0 {
		t.Errorf("lost %d, duplicated %d; both must be 0", rep.Lost, rep.Duplicated)
	}
	if got := ff.live(); len(got) != 3 {
		t.Errorf("worker processes alive after the restarts: %v, want 3", got)
	}
}

// TestFaultRedisRestarted kills Redis (which keeps nothing on disk) in the
// middle of the load and starts it again empty a second later: the
// dispatcher keeps routing from its view meanwhile, and every worker
// re-advertises within one heartbeat of Redis coming back.
func TestFaultRedisRestarted(t *testing.T) {
	sc := faultSize()
	ff := newFaultFleet(t, 3)
	d, ac := ff.dispatcher()
	waitLive(t, d, "work", 3)
	heartbeat := ff.fleet.Registry().TTL() / 3 // the registry's default heartbeat interval
	var readvertised []time.Duration
	base, fault, restarts := ff.faultRun(d, sc, 0, []float64{0.3, 0.65}, func() {
		ff.fleet.Redis.Kill()
		time.Sleep(faultOutage) // the outage itself, not a wait for an event
		ff.fleet.Redis.Restart(t)
		back := time.Now()
		workers := ff.live()
		fleettest.WaitFor(t, 10*time.Second, "every worker re-advertised", func() bool {
			info, err := ff.fleet.Registry().Lookup(context.Background(), "work")
			if err != nil {
				return false
			}
			live := info.LiveWorkers(time.Now())
			for _, id := range workers {
				if !slices.Contains(live, id) {
					return false
				}
			}
			return true
		})
		readvertised = append(readvertised, time.Since(back))
	})
	rep := ff.report("Redis killed and restarted empty", restarts, d, ac, base, fault)
	t.Logf("FAULT Redis: every worker re-advertised %v after Redis came back (heartbeat %s)", readvertised, heartbeat)
	if restarts != 2 {
		t.Errorf("Redis was restarted %d times during the load, want 2", restarts)
	}
	for _, took := range readvertised {
		// One heartbeat, plus the backoff of a renewal that failed
		// while Redis was down (capped at one heartbeat interval).
		if took > 2*heartbeat+500*time.Millisecond {
			t.Errorf("workers re-advertised %s after Redis came back; want within about one heartbeat (%s)", took, heartbeat)
		}
	}
	if rep.Lost != 0 || rep.Duplicated != 0 || rep.Refused != 0 {
		t.Errorf("lost %d, duplicated %d, refused %d; all must be 0", rep.Lost, rep.Duplicated, rep.Refused)
	}
}

// TestFaultWorkerPausedPastAckWait pauses a worker (SIGSTOP) in the middle
// of a call for longer than the ack wait, so JetStream redelivers the call
// to another worker, which answers it; then resumes the paused one, whose
// stale attempt finishes second. The caller sees one answer, the new
// attempt's; the stale answer is dropped by the results stream (counted by
// the worker as a duplicate); nothing stays in the work queue.
func TestFaultWorkerPausedPastAckWait(t *testing.T) {
	ff := newFaultFleet(t, 1)
	paused := ff.live()[0]
	d, ac := ff.dispatcher()
	waitLive(t, d, "work", 1)
	id, err := d.Submit(t.Context(), "work", workArgs{MS: 1500}, dispatcher.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 10*time.Second, "the call running on "+paused, func() bool {
		st, err := d.Status(t.Context(), id)
		return err == nil && st.State == dispatcher.StateRunning && st.Worker == paused
	})
	ff.signal(paused, syscall.SIGSTOP)
	pausedAt := time.Now()
	other := ff.startWorker()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := d.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	answeredAfter := time.Since(pausedAt)
	// Attempt 2: the paused worker's pull requests expired before the
	// redelivery (they stay open at most half the ack wait), so it went to
	// the live worker.
	if r.IsError || r.Worker != other || r.Attempt != 2 {
		t.Fatalf("answer while %s is paused: %+v; want success from %s, attempt 2", paused, r, other)
	}
	if answeredAfter < faultAckWait {
		t.Errorf("answered %s after the pause, before the ack wait (%s) could have passed", answeredAfter, faultAckWait)
	}
	ff.signal(paused, syscall.SIGCONT)
	fleettest.WaitFor(t, 10*time.Second, "the stale attempt finished", func() bool { return ff.executions()[id] == 2 })
	fleettest.WaitFor(t, 10*time.Second, "the stale answer published", func() bool { return ac.extra() == 1 })
	stored, err := d.Result(t.Context(), id)
	if err != nil || stored.Worker != other || stored.Attempt != r.Attempt {
		t.Errorf("recorded answer: %+v, %v; want the new attempt's, from %s", stored, err, other)
	}
	ff.stop(paused)
	if log := ff.workerLog(paused); !strings.Contains(log, "duplicate_results=1") {
		t.Errorf("the resumed worker did not count its stale answer as a duplicate:\n%s", log)
	}
	ff.waitQueueEmpty(10 * time.Second)
	t.Logf("FAULT worker paused past the ack wait: 1 call, 2 executions (%s stale, %s new), answered once to the caller by attempt %d after %s, 1 stale answer dropped as a duplicate; the resumed worker's %s",
		paused, other, r.Attempt, answeredAfter.Round(time.Millisecond), statsLine(ff.workerLog(paused)))
}

// statsLine returns the stats a fault worker printed when it stopped.
func statsLine(log string) string {
	for line := range strings.Lines(log) {
		if _, stats, ok := strings.Cut(line, " stats: "); ok {
			return strings.TrimSpace(stats)
		}
	}
	return "(no stats)"
}
