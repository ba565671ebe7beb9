package integration_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// payloadSubjects counts the payloads bucket's messages on the subjects
// matching filter (its chunks, "$O.<bucket>.C.>", or its objects' meta
// records, "$O.<bucket>.M.>").
func payloadSubjects(t *testing.T, js jetstream.JetStream, filter string) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), "OBJ_"+layout.PayloadsBucket)
	if err != nil {
		return 0
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

var (
	payloadChunks = "$O." + layout.PayloadsBucket + ".C.>"
	payloadMetas  = "$O." + layout.PayloadsBucket + ".M.>"
)

// checkBulk checks a bulk call's one answer: from attempt, of the asked
// size, stored once.
func checkBulk(t *testing.T, d *dispatcher.Dispatcher, id string, mb, attempt int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := d.Wait(ctx, id)
	if err != nil || r.IsError || len(r.Content) != mb<<20 || !strings.HasPrefix(r.Content, bulkPrefix(attempt)) {
		t.Fatalf("answer: %.80q (%d bytes, attempt %d), %v; want %d MiB from attempt %d", r.Content, len(r.Content), r.Attempt, err, mb, attempt)
	}
	stored, err := d.Result(ctx, id)
	if err != nil || stored.Content != r.Content {
		t.Errorf("stored answer: %.80q, %v; want the one the caller got", stored.Content, err)
	}
}

// TestFaultWorkerKilledMidUpload kills a worker process (SIGKILL) while it
// uploads a 48 MiB result to the payloads bucket: the call is redelivered
// after the ack wait and answered once, by the one attempt the new worker
// ran; the first attempt's partial upload is never read, and no upload makes
// its call run again (a regression: under load, in-progress acks queued
// behind the 48 MiB upload, the call was redelivered while it uploaded,
// and ran a second time beside it).
func TestFaultWorkerKilledMidUpload(t *testing.T) {
	ff := newFaultFleet(t, 1)
	d, _ := ff.dispatcher()
	waitLive(t, d, "bulk", 1)
	js := ff.fleet.JetStream()
	const mb = 48
	for try := 1; ; try++ {
		victim := ff.live()[0]
		id, err := d.Submit(t.Context(), "bulk", bulkArgs{MB: mb}, dispatcher.WithTimeout(3*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		chunks, metas := payloadSubjects(t, js, payloadChunks), payloadSubjects(t, js, payloadMetas)
		fleettest.WaitFor(t, time.Minute, "the result's upload under way", func() bool { return payloadSubjects(t, js, payloadChunks) > chunks })
		ff.signal(victim, syscall.SIGSTOP) // frozen where it is, then checked
		if payloadSubjects(t, js, payloadMetas) > metas {
			// The whole upload happened between two looks: not this
			// scenario. Let it finish, and try again.
			ff.signal(victim, syscall.SIGCONT)
			checkBulk(t, d, id, mb, 1)
			if try == 3 {
				t.Fatal("three uploads finished before the test could stop their worker")
			}
			continue
		}
		ff.signal(victim, syscall.SIGKILL)
		if _, err := d.Result(t.Context(), id); !errors.Is(err, dispatcher.ErrNoResult) {
			t.Fatalf("a result was stored before the kill: %v", err)
		}
		fresh := ff.startWorker()
		defer func() {
			if t.Failed() {
				b, _ := os.ReadFile(ff.execLog())
				t.Logf("executions:\n%s\nthe killed worker's log:\n%s", b, ff.workerLog(victim))
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		r, err := d.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		checkBulk(t, d, id, mb, r.Attempt)
		ff.waitQueueEmpty(30 * time.Second)
		// The tool ran once on the killed worker and once on the new one,
		// whose attempt answered. That attempt is 2 unless a delivery went
		// to the killed worker while it was frozen (its pull still open)
		// or while its acknowledgements were late: that worker ran none.
		want := []execution{{attempt: 1, worker: victim}, {attempt: r.Attempt, worker: fresh}}
		if got := ff.starts(id); !slices.Equal(got, want) || r.Attempt < 2 {
			t.Errorf("the tool started %v, and attempt %d answered; want %v", got, r.Attempt, want)
		}
		t.Logf("FAULT worker killed mid-upload: answered once, by attempt %d, after %d tries", r.Attempt, try)
		return
	}
}

// TestFaultNATSRestartedMidUpload stops the NATS server while a worker
// uploads a 48 MiB result and starts it again a second later: the upload
// is made again, and the call is answered once, in full.
func TestFaultNATSRestartedMidUpload(t *testing.T) {
	ff := newFaultFleet(t, 1)
	d, _ := ff.dispatcher()
	waitLive(t, d, "bulk", 1)
	js := ff.fleet.JetStream()
	const mb = 48
	id, err := d.Submit(t.Context(), "bulk", bulkArgs{MB: mb}, dispatcher.WithTimeout(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, time.Minute, "the result's upload under way", func() bool { return payloadSubjects(t, js, payloadChunks) > 0 })
	ff.fleet.NATS.Stop()
	time.Sleep(faultOutage) // the outage itself, not a wait for an event
	ff.fleet.NATS.Restart(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := d.Wait(ctx, id)
	if err != nil || r.IsError || len(r.Content) != mb<<20 || !strings.HasPrefix(r.Content, "attempt ") {
		t.Fatalf("answer: %.80q (%d bytes), %v; want %d MiB", r.Content, len(r.Content), err, mb)
	}
	checkBulk(t, d, id, mb, r.Attempt)
	ff.waitQueueEmpty(30 * time.Second)
	t.Logf("FAULT NATS restarted mid-upload: answered once, by attempt %d", r.Attempt)
}
