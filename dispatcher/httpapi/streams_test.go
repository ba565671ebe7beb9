package httpapi_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
)

// stream is an event stream a test holds open, or the answer that
// refused it.
type stream struct {
	status int
	header http.Header
	body   string // of a refusal
	close  func() // ends an open stream from the client's side
}

// openStream opens the event stream of call id with key; an open stream is
// read up to its first event (queued), so the server holds it.
func (f *fleet) openStream(t *testing.T, id, key string) stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/calls/"+id+"/events", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open the events of %s: %v", id, err)
	}
	s := stream{status: res.StatusCode, header: res.Header, close: func() { cancel(); res.Body.Close() }}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		s.body = string(b)
		s.close()
		return s
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && sc.Text() != "event: queued" {
	}
	if sc.Err() != nil {
		s.close()
		t.Fatalf("read the events of %s: %v", id, sc.Err())
	}
	return s
}

// eventConsumers counts the consumers of the events stream.
func eventConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	s, err := js.Stream(t.Context(), layout.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// TestEventStreamsLeaveNoConsumers opens and closes 1,000 event streams,
// in batches of 8 at once: half on a running call, closed by the client
// after the first event; half on a finished call, which the server ends
// after replaying it. Each stream's consumer is deleted when the stream
// ends, so the events stream's consumer count returns to where it was (it
// used to keep each one for its 5 minutes of inactivity).
func TestEventStreamsLeaveNoConsumers(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	js := f.JetStream()
	done := f.call(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2}}`), http.StatusOK)
	running := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true}`), http.StatusAccepted)
	defer f.do("DELETE", "/v1/calls/"+running.ID, "")
	f.pollUntil(running.ID, "the slow call to start", func(c httpapi.Call) bool { return c.State == dispatcher.StateRunning })
	baseline := eventConsumers(t, js)

	const streams, parallel = 1000, 8
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Go(func() {
			for i := w; i < streams; i += parallel {
				// Even: the client leaves after the first event. Odd: the
				// server ends the stream with the finished event.
				id, want := running.ID, "event: queued"
				if i%2 == 1 {
					id, want = done.ID, ""
				}
				if err := f.streamOnce(t.Context(), id, want); err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := eventConsumers(t, js)
	t.Logf("consumers on %s right after the last stream: %d", layout.EventsStream, n)
	fleettest.WaitFor(t, 30*time.Second, fmt.Sprintf("the consumers on %s back to the %d from before %d streams", layout.EventsStream, baseline, streams), func() bool {
		n = eventConsumers(t, js)
		return n == baseline
	})
	t.Logf("consumers on %s: %d before, %d after %d streams", layout.EventsStream, baseline, n, streams)
}

// TestEventStreamsPerKey bounds the streams of one API key: past
// MaxStreamsPerKey the key gets 429 too_many_streams with a Retry-After,
// while another key still gets its streams; closing a stream frees its
// slot.
func TestEventStreamsPerKey(t *testing.T) {
	alice, bob := httpapi.NewAPIKey(), httpapi.NewAPIKey()
	f := newFleet(t, httpapi.Config{
		APIKeys:          []httpapi.APIKey{{Name: "alice", SHA256: httpapi.HashAPIKey(alice)}, {Name: "bob", SHA256: httpapi.HashAPIKey(bob)}},
		MaxStreamsPerKey: 2,
	})
	f.key = alice
	c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true}`), http.StatusAccepted)
	defer f.do("DELETE", "/v1/calls/"+c.ID, "")

	first, second := f.openStream(t, c.ID, alice), f.openStream(t, c.ID, alice)
	defer second.close()
	if first.status != http.StatusOK || second.status != http.StatusOK {
		t.Fatalf("alice's first two streams: %d %s, %d %s", first.status, first.body, second.status, second.body)
	}
	third := f.openStream(t, c.ID, alice)
	tooMany(t, "alice's third stream", third, "alice")
	other := f.openStream(t, c.ID, bob)
	if other.status != http.StatusOK {
		t.Errorf("bob's stream while alice is at her limit: %d %s", other.status, other.body)
	}
	other.close()

	first.close()
	fleettest.WaitFor(t, 10*time.Second, "alice's slot to free once her stream closed", func() bool {
		s := f.openStream(t, c.ID, alice)
		s.close()
		return s.status == http.StatusOK
	})
}

// TestEventStreamsPerProcess bounds the streams of the process: past
// MaxStreams every request gets 429 too_many_streams with a Retry-After
// (without API keys, only this bound applies); closing a stream frees its
// slot.
func TestEventStreamsPerProcess(t *testing.T) {
	f := newFleet(t, httpapi.Config{MaxStreams: 2, MaxStreamsPerKey: 1})
	c := f.call(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":120000},"async":true}`), http.StatusAccepted)
	defer f.do("DELETE", "/v1/calls/"+c.ID, "")

	first, second := f.openStream(t, c.ID, ""), f.openStream(t, c.ID, "")
	defer second.close()
	if first.status != http.StatusOK || second.status != http.StatusOK {
		t.Fatalf("the first two streams (MaxStreamsPerKey 1 does not apply without keys): %d %s, %d %s", first.status, first.body, second.status, second.body)
	}
	tooMany(t, "a third stream", f.openStream(t, c.ID, ""), "MaxStreams")
	// The bound is on streams only: a GET of the call is served.
	f.call(f.do("GET", "/v1/calls/"+c.ID, ""), http.StatusOK)

	first.close()
	fleettest.WaitFor(t, 10*time.Second, "a slot to free once a stream closed", func() bool {
		s := f.openStream(t, c.ID, "")
		s.close()
		return s.status == http.StatusOK
	})
}

// tooMany checks a 429 too_many_streams answer with a Retry-After and a
// message naming the bound.
func tooMany(t *testing.T, what string, s stream, names string) {
	t.Helper()
	r := response{status: s.status, header: s.header, body: []byte(s.body)}
	if r.status != http.StatusTooManyRequests || r.errorCode() != httpapi.CodeTooManyStreams {
		t.Fatalf("%s = %s; want 429 too_many_streams", what, r)
	}
	if secs, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("%s: Retry-After %q; want a number of seconds", what, r.header.Get("Retry-After"))
	}
	var body httpapi.ErrorBody
	r.decode(t, &body)
	if !strings.Contains(body.Error.Message, names) {
		t.Errorf("%s: message %q does not name %q", what, body.Error.Message, names)
	}
}

// streamOnce opens the event stream of call id and reads it until want
// (an event line), or to its end when want is "", then closes it; for
// goroutines, where a test cannot fail fatally.
func (f *fleet) streamOnce(ctx context.Context, id, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/calls/"+id+"/events", nil)
	if err != nil {
		return err
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%d %s", res.StatusCode, b)
	}
	var last string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			last = sc.Text()
			if last == want {
				return nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if want != "" || last != "event: finished" {
		return fmt.Errorf("the stream ended after %q, before %q", last, cmp.Or(want, "event: finished"))
	}
	return nil
}
