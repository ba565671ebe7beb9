package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSOptions configures NewNATS and StartNATS. The zero value is a
// JetStream-enabled server with the server defaults.
type NATSOptions struct {
	// MaxPayload is the largest message payload, in bytes, that the server
	// accepts; 0 keeps the server default (1 MiB).
	MaxPayload int32
	// SyncAlways makes JetStream sync every write to disk before it is
	// acknowledged (`jetstream { sync_interval: always }`); the server
	// default syncs every 2 minutes.
	SyncAlways bool
	// ConfigFile, when set, is a nats-server configuration file loaded with
	// the server's own parser (accounts, users, permissions, ...); a warning
	// fails the start. The harness still sets the listen address (127.0.0.1,
	// a free port), the JetStream store directory and quiet logging, and
	// turns JetStream on.
	ConfigFile string
}

// NATS is an in-process nats-server with JetStream enabled. Its URL and its
// JetStream store directory stay the same across Restart.
type NATS struct {
	opts     NATSOptions
	storeDir string

	mu     sync.Mutex
	port   int // server.RANDOM_PORT until the first start picks one
	srv    *server.Server
	closed bool // by Close: the store directory is gone
	rmErr  error
}

// NewNATS starts a nats-server with JetStream on a free port of 127.0.0.1,
// with its store in a new temporary directory, and waits until it accepts
// connections. The caller must call [NATS.Close], which shuts the server
// down and removes the directory. At most one NATSOptions may be given.
//
// NewNATS needs no testing.TB, so runnable examples can use it; tests use
// [StartNATS].
func NewNATS(opts ...NATSOptions) (*NATS, error) {
	o, err := single(opts)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "testserver-nats-")
	if err != nil {
		return nil, fmt.Errorf("testserver: create a store directory for nats-server: %w", err)
	}
	n := &NATS{opts: o, storeDir: dir, port: server.RANDOM_PORT}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return n, nil
}

// StartNATS is [NewNATS] for a test: it calls tb.Fatalf on error and
// [NATS.Close] when the test ends, failing the test if the store directory
// cannot be removed.
func StartNATS(tb testing.TB, opts ...NATSOptions) *NATS {
	tb.Helper()
	n, err := NewNATS(opts...)
	return started(tb, n, err)
}

// start starts a server on n.port; n.mu must be held.
func (n *NATS) start() error {
	if n.closed {
		return errors.New("testserver: nats-server was closed")
	}
	opts := &server.Options{}
	if n.opts.ConfigFile != "" {
		// Warnings (an unknown field, say) fail too: the file is meant to
		// be exactly what a deployment loads.
		if err := opts.ProcessConfigFile(n.opts.ConfigFile); err != nil {
			return fmt.Errorf("testserver: load %s: %w", n.opts.ConfigFile, err)
		}
	}
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir = "127.0.0.1", n.port, true, n.storeDir
	opts.HTTPPort, opts.Cluster.Port, opts.NoLog, opts.NoSigs = 0, 0, true, true
	if n.opts.MaxPayload != 0 {
		opts.MaxPayload = n.opts.MaxPayload
	}
	if n.opts.SyncAlways {
		opts.SyncAlways = true
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("testserver: configure nats-server: %w", err)
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
		return fmt.Errorf("testserver: nats-server on 127.0.0.1:%d did not start: %s", max(n.port, 0), msgs)
	}
	n.port = s.Addr().(*net.TCPAddr).Port
	n.srv = s
	return nil
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
	n.stop()
}

// stop is Stop with n.mu held.
func (n *NATS) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Restart stops the server if it is running and starts a new one on the same
// port with the same JetStream store directory, so streams, consumers and
// their messages survive. It fails after Close.
func (n *NATS) Restart(tb testing.TB) {
	tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stop()
	if err := n.start(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Close shuts the server down, as Stop does, and removes the store directory
// that NewNATS created. After Close, Restart fails; Close again does
// nothing.
func (n *NATS) Close() { _ = n.close() }

// close is Close, reporting whether the store directory could be removed
// (the same error on every call).
func (n *NATS) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		n.stop()
		if err := os.RemoveAll(n.storeDir); err != nil {
			n.rmErr = fmt.Errorf("testserver: remove the nats-server store: %w", err)
		}
	}
	return n.rmErr
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
func single[T any](opts []T) (T, error) {
	var o T
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return o, fmt.Errorf("testserver: at most one %T may be given, got %d", o, len(opts))
	}
	return o, nil
}

// started is the end of every Start function: it calls tb.Fatalf if err is
// set, and v's close when the test ends, failing the test if that reports
// an error (a directory it could not remove).
func started[T interface{ close() error }](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := v.close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return v
}
