package testserver

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSOptions configures StartNATS. The zero value is a JetStream-enabled
// server with the server defaults.
type NATSOptions struct {
	// MaxPayload is the largest message payload, in bytes, that the server
	// accepts; 0 keeps the server default (1 MiB).
	MaxPayload int32
}

// NATS is an in-process nats-server with JetStream enabled. Its URL and its
// JetStream store directory stay the same across Restart.
type NATS struct {
	opts     NATSOptions
	storeDir string

	mu   sync.Mutex
	port int // server.RANDOM_PORT until the first start picks one
	srv  *server.Server
}

// StartNATS starts a nats-server with JetStream on a free port of
// 127.0.0.1, with its store in a temporary directory, and waits until it
// accepts connections. The server is shut down when the test ends. At most
// one NATSOptions may be given.
func StartNATS(tb testing.TB, opts ...NATSOptions) *NATS {
	tb.Helper()
	n := &NATS{opts: single(tb, opts), storeDir: tb.TempDir(), port: server.RANDOM_PORT}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start(tb)
	tb.Cleanup(n.Stop) // registered after TempDir, so it runs before the removal
	return n
}

// start starts a server on n.port; n.mu must be held.
func (n *NATS) start(tb testing.TB) {
	tb.Helper()
	s, err := server.NewServer(&server.Options{
		Host:       "127.0.0.1",
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.storeDir,
		MaxPayload: n.opts.MaxPayload,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		tb.Fatalf("testserver: configure nats-server: %v", err)
	}
	log := &natsLog{}
	s.SetLogger(log, false, false)
	s.Start() // returns once the listener is up or has failed
	fatal, msgs := log.state()
	if !fatal && !s.ReadyForConnections(10*time.Second) {
		fatal, msgs = true, "not ready for connections within 10s; "+msgs
	}
	if fatal {
		s.Shutdown()
		s.WaitForShutdown()
		tb.Fatalf("testserver: nats-server on 127.0.0.1:%d did not start: %s", max(n.port, 0), msgs)
	}
	n.port = s.Addr().(*net.TCPAddr).Port
	n.srv = s
}

// URL returns the server's client URL, nats://127.0.0.1:PORT. It is the same
// after Restart.
func (n *NATS) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", n.port)
}

// Server returns the running server instance, which Restart replaces, or
// nil after Stop.
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Stop shuts the server down and waits until it has. Clients are
// disconnected and try to reconnect. Stop does nothing if the server is not
// running.
func (n *NATS) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Restart stops the server if it is running and starts a new one on the same
// port with the same JetStream store directory, so streams, consumers and
// their messages survive.
func (n *NATS) Restart(tb testing.TB) {
	tb.Helper()
	n.Stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start(tb)
}

// Connect connects a client to the server and closes it when the test ends.
// The connection reconnects forever, retrying every 20ms, so that it comes
// back soon after Restart; opts are applied after these defaults and can
// override them.
func (n *NATS) Connect(tb testing.TB, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	defaults := []nats.Option{
		nats.Name(tb.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
	}
	nc, err := nats.Connect(n.URL(), append(defaults, opts...)...)
	if err != nil {
		tb.Fatalf("testserver: connect to %s: %v", n.URL(), err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// natsLog is a server.Logger that keeps the last error and fatal messages,
// so that a server that fails to start can say why. With a logger set, the
// server's Fatalf does not exit the process.
type natsLog struct {
	mu    sync.Mutex
	fatal bool
	msgs  []string
}

func (l *natsLog) Errorf(format string, v ...any) { l.add(false, format, v) }
func (l *natsLog) Fatalf(format string, v ...any) { l.add(true, format, v) }
func (*natsLog) Noticef(string, ...any)           {}
func (*natsLog) Warnf(string, ...any)             {}
func (*natsLog) Debugf(string, ...any)            {}
func (*natsLog) Tracef(string, ...any)            {}

func (l *natsLog) add(fatal bool, format string, v []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatal = l.fatal || fatal
	if len(l.msgs) == 20 {
		l.msgs = l.msgs[1:]
	}
	l.msgs = append(l.msgs, fmt.Sprintf(format, v...))
}

// state reports whether a fatal message was logged, and the kept messages.
func (l *natsLog) state() (fatal bool, msgs string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal, strings.Join(l.msgs, "; ")
}

// single returns the only element of opts, or the zero value if there is none.
func single[T any](tb testing.TB, opts []T) T {
	tb.Helper()
	var o T
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		tb.Fatalf("testserver: at most one %T may be given, got %d", o, len(opts))
	}
	return o
}
