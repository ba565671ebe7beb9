package testserver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures NewRedis and StartRedis. The zero value keeps no
// data on disk: a restarted server starts empty.
type RedisOptions struct {
	// Persist turns on the append-only file with an fsync after every write,
	// so that data written before Stop, Kill or Restart is there after
	// Restart.
	Persist bool
}

// Redis is a redis-server child process. Its address and its data directory
// stay the same across Restart.
type Redis struct {
	bin, dir string
	persist  bool
	extra    []string // arguments after the defaults: cluster or sentinel mode

	mu     sync.Mutex
	port   int
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	closed bool          // by Close: the data directory is gone
	rmErr  error
}

// redisTimeout bounds how long a redis-server may take to answer PING after
// it is started and to exit after SIGTERM.
const redisTimeout = 10 * time.Second

// NewRedis starts redis-server from PATH on a free port of 127.0.0.1, with
// its data directory and log file in a new temporary directory, and waits
// until it answers PING. The caller must call [Redis.Close], which kills the
// process and removes the directory. At most one RedisOptions may be given.
//
// If redis-server is not installed NewRedis fails, saying how to install
// it: the integration tests need a real server, never a fake. NewRedis needs
// no testing.TB, so runnable examples can use it; tests use [StartRedis].
func NewRedis(opts ...RedisOptions) (*Redis, error) {
	o, err := single(opts)
	if err != nil {
		return nil, err
	}
	return newRedis(o, "")
}

// newRedis is NewRedis with conf, the first content of the server's
// configuration file (redis.conf in its data directory, which the server
// may rewrite: CONFIG REWRITE, Sentinel's state), and extra arguments after
// the defaults.
func newRedis(o RedisOptions, conf string, extra ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("testserver: redis-server is not installed (%w); install it with `apt-get install -y redis-server` (`make test` installs it)", err)
	}
	dir, err := os.MkdirTemp("", "testserver-redis-")
	if err != nil {
		return nil, fmt.Errorf("testserver: create a data directory for redis-server: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "redis.conf"), []byte(conf), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testserver: write the redis-server configuration file: %w", err)
	}
	r := &Redis{bin: bin, dir: dir, persist: o.Persist, extra: extra}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The port is free when picked but may be taken before redis-server
	// binds it, by another test; then try another one.
	for attempt := 1; ; attempt++ {
		if r.port, err = freePort(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("testserver: pick a port for redis-server: %w", err)
		}
		inUse, err := r.start()
		if err == nil {
			return r, nil
		}
		if !inUse || attempt == 5 {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("testserver: %w", err)
		}
	}
}

// StartRedis is [NewRedis] for a test: it calls tb.Fatalf on error (so the
// test fails when redis-server is not installed) and [Redis.Close] when the
// test ends, failing the test if the data directory cannot be removed.
func StartRedis(tb testing.TB, opts ...RedisOptions) *Redis {
	tb.Helper()
	r, err := NewRedis(opts...)
	return started(tb, r, err)
}

// Addr returns the server's address, 127.0.0.1:PORT. It is the same after
// Restart.
func (r *Redis) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
}

// URL returns the server's URL for database 0, redis://127.0.0.1:PORT/0, as
// understood by redis.ParseURL.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Stop sends SIGTERM to the server and waits until it has exited, killing it
// if it takes longer than 10s. Stop does nothing if the server is not
// running.
func (r *Redis) Stop() { r.halt(syscall.SIGTERM) }

// Kill kills the server with SIGKILL, as in a crash, and waits until it has
// exited. Kill does nothing if the server is not running.
func (r *Redis) Kill() { r.halt(syscall.SIGKILL) }

// Restart stops the server if it is running and starts it again on the same
// port with the same data directory. It fails after Close.
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.haltLocked(syscall.SIGTERM)
	if r.closed {
		tb.Fatalf("testserver: restart: redis-server was closed")
	}
	if _, err := r.start(); err != nil {
		tb.Fatalf("testserver: restart: %v", err)
	}
}

// Close kills the server, as Kill does, and removes the data directory that
// NewRedis created. After Close, Restart fails; Close again does nothing.
func (r *Redis) Close() { _ = r.close() }

// close is Close, reporting whether the data directory could be removed
// (the same error on every call).
func (r *Redis) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.haltLocked(syscall.SIGKILL)
		if err := os.RemoveAll(r.dir); err != nil {
			r.rmErr = fmt.Errorf("testserver: remove the redis-server data directory: %w", err)
		}
	}
	return r.rmErr
}

// Client returns a go-redis client for the server, closed when the test ends.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// start runs redis-server on r.port and waits until it answers PING; inUse
// reports that it failed because the port was taken. r.mu must be held.
func (r *Redis) start() (inUse bool, err error) {
	args := []string{
		filepath.Join(r.dir, "redis.conf"),
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--daemonize", "no",
		"--logfile", filepath.Join(r.dir, "redis.log"),
		"--save", "",
	}
	if r.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, r.extra...)
	// Errors in the arguments are written to stderr before the log file is
	// opened, so stdout and stderr go to the log file too.
	logf, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	defer logf.Close()
	fi, err := logf.Stat()
	if err != nil {
		return false, err
	}
	logStart := fi.Size() // where this run's lines begin
	cmd := exec.Command(r.bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = r.dir, logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	timeout := time.NewTimer(redisTimeout)
	defer timeout.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			tail := r.logTail(logStart)
			return strings.Contains(tail, "Address already in use"),
				fmt.Errorf("redis-server on %s exited (%v); log:\n%s", addr, cmd.ProcessState, tail)
		default:
		}
		err := ping(addr, cmd.Process.Pid)
		if err == nil {
			r.cmd, r.done = cmd, done
			return false, nil
		}
		select {
		case <-done: // reported at the top of the loop
		case <-tick.C:
		case <-timeout.C:
			_ = cmd.Process.Kill()
			<-done
			return false, fmt.Errorf("redis-server on %s did not answer PING within %v (%v); log:\n%s", addr, redisTimeout, err, r.logTail(logStart))
		}
	}
}

// halt sends sig to the server, if it is running, and waits until it has
// exited.
func (r *Redis) halt(sig os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.haltLocked(sig)
}

// haltLocked is halt with r.mu held.
func (r *Redis) haltLocked(sig os.Signal) {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(redisTimeout):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd, r.done = nil, nil
}

// logTail returns the last lines of the log file written since offset from.
func (r *Redis) logTail(from int64) string {
	b, err := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b[min(from, int64(len(b))):])), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}

// ping checks that the server at addr answers PING and is the process pid,
// not another server that got the port first.
func ping(addr string, pid int) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	if line, err = br.ReadString('\n'); err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if err != nil {
		return fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(br, info); err != nil {
		return err
	}
	if !bytes.Contains(info, []byte("\r\nprocess_id:"+strconv.Itoa(pid)+"\r\n")) {
		return fmt.Errorf("%s is served by another process than redis-server pid %d", addr, pid)
	}
	return nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// running reports whether the server process is running: started and not
// stopped, killed or closed since.
func (r *Redis) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
}
