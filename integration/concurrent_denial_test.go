package integration_test

import (
	"bytes"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/layout"
)

// oneRequestLost dials real connections that, once armed, lose the first
// client write carrying a request to subject (the server never sees it,
// so never answers: a request lost to a stalled network or a busy server).
type oneRequestLost struct {
	subject      string
	armed, spent atomic.Bool
	lost         chan struct{}
}

func (d *oneRequestLost) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, d: d}, nil
}

type losingConn struct {
	net.Conn
	d *oneRequestLost
}

func (c *losingConn) Write(b []byte) (int, error) {
	if c.d.armed.Load() && bytes.Contains(b, []byte(" "+c.d.subject+" ")) && c.d.spent.CompareAndSwap(false, true) {
		close(c.d.lost)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// TestAConcurrentDenialOfAnotherRequestIsNotThisOnes: a dispatcher user
// (deploy/nats/accounts.conf) may read WINDLASS_CALLS's info but not
// update it. On one connection, an EnsureStreams of WINDLASS_CALLS whose
// info request goes unanswered once (a request the user may make, which
// the second attempt gets answered) runs while BoundCalls is refused its
// STREAM.UPDATE (tolerated by dispatcher.New). At 424b3c0 any refusal
// naming "$JS.API.STREAM." and the stream during the attempt was taken
// for the ensure's own, and it ended at once with ErrNotPermitted; only
// the request's own subjects (INFO, CREATE) are (found by a review
// helper).
func TestAConcurrentDenialOfAnotherRequestIsNotThisOnes(t *testing.T) {
	ps := startPermServer(t)
	drop := &oneRequestLost{subject: "$JS.API.STREAM.INFO." + layout.CallsStream, lost: make(chan struct{})}
	nc, err := nats.Connect(ps.nats.URL(), nats.UserInfo("dispatcher-a", ps.passwords["dispatcher-a"]),
		nats.CustomInboxPrefix(deploy.InboxPrefix("dispatcher-a")), nats.SetCustomDialer(drop),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { t.Logf("async error: %v", err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { t.Logf("disconnected: %v", err) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc, jetstream.WithDefaultTimeout(2*time.Second))

	if _, err := js.Stream(t.Context(), layout.ResultsStream); err != nil { // the connection's reply subscription, made once
		t.Fatal(err)
	}
	drop.armed.Store(true)
	ensured := make(chan error, 1)
	start := time.Now()
	go func() { ensured <- layout.EnsureStreams(t.Context(), js, layout.CallsConfig(layout.StreamOptions{})) }()
	<-drop.lost // the ensure's first info request is on its way to nowhere

	// Meanwhile, on the same connection: BoundCalls, as dispatcher.New
	// makes it with a bound, refused (documented, tolerated).
	if _, err := layout.BoundCalls(t.Context(), js, layout.StreamOptions{MaxQueuedCalls: 50}); !errors.Is(err, layout.ErrNotPermitted) {
		t.Fatalf("BoundCalls = %v; want ErrNotPermitted", err)
	}
	err = <-ensured
	t.Logf("EnsureStreams after %s: %v", time.Since(start).Round(100*time.Millisecond), err)
	if err != nil {
		t.Errorf("EnsureStreams = %v; want success: its own request was only lost once, and its user may make it (the refusal was of BoundCalls' update)", err)
	}
}
