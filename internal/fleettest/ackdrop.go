package fleettest

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// AckDropper dials real connections (for nats.SetCustomDialer) that, once
// armed, lose the next publish acknowledgement of Stream that the server
// sends back: the message is stored, and its publisher never hears so —
// what a reply lost in a NATS restart or a leader change looks like, which
// a real server cannot be made to do to one publish. Every other frame
// passes.
type AckDropper struct {
	// Stream whose acknowledgement is dropped.
	Stream string

	armed, dropped atomic.Bool
}

// Arm makes the next acknowledgement of d.Stream that reaches any of d's
// connections the one dropped (only one ever is).
func (d *AckDropper) Arm() { d.armed.Store(true) }

// Dropped reports whether an acknowledgement was dropped.
func (d *AckDropper) Dropped() bool { return d.dropped.Load() }

// Dial implements nats.CustomDialer.
func (d *AckDropper) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

// dropConn reads whole protocol frames from the server and hands them on,
// less the acknowledgement to drop.
type dropConn struct {
	net.Conn
	d       *AckDropper
	mu      sync.Mutex
	in, out []byte // read, not yet framed; framed, for the client
}

func (c *dropConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.out) == 0 {
		buf := make([]byte, 64<<10)
		n, err := c.Conn.Read(buf)
		c.in = append(c.in, buf[:n]...)
		c.frame()
		if err != nil && len(c.out) == 0 {
			return 0, err
		}
	}
	n := copy(b, c.out)
	c.out = c.out[n:]
	return n, nil
}

// frame moves every complete frame from in to out, except the one
// acknowledgement to drop: a MSG (no headers) whose small JSON body names
// the stream and is not a duplicate's.
func (c *dropConn) frame() {
	for {
		i := bytes.Index(c.in, []byte("\r\n"))
		if i < 0 {
			return
		}
		line, end := c.in[:i], i+2
		if bytes.HasPrefix(line, []byte("MSG ")) || bytes.HasPrefix(line, []byte("HMSG ")) {
			f := bytes.Fields(line)
			size, _ := strconv.Atoi(string(f[len(f)-1]))
			if len(c.in) < end+size+2 {
				return // the rest of the frame is still to come
			}
			body := c.in[end : end+size]
			end += size + 2
			if bytes.HasPrefix(line, []byte("MSG ")) && c.isTheAck(body) {
				c.in = c.in[end:]
				continue
			}
		}
		c.out = append(c.out, c.in[:end]...)
		c.in = c.in[end:]
	}
}

// isTheAck reports whether body is the acknowledgement to drop, and if it
// is, marks it dropped.
func (c *dropConn) isTheAck(body []byte) bool {
	return len(body) < 300 && c.d.armed.Load() &&
		bytes.Contains(body, []byte(`"stream":"`+c.d.Stream+`"`)) && !bytes.Contains(body, []byte(`"duplicate"`)) &&
		c.d.dropped.CompareAndSwap(false, true)
}
