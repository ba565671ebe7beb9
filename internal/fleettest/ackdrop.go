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
	return &dropConn{Conn: c, drop: d.isTheAck}, nil
}

// isTheAck reports whether a frame is the acknowledgement to drop — a MSG
// (no headers) whose small JSON body names the stream and is not a
// duplicate's — and if it is, marks it dropped.
func (d *AckDropper) isTheAck(head, body []byte) bool {
	return bytes.HasPrefix(head, []byte("MSG ")) && len(body) < 300 && d.armed.Load() &&
		bytes.Contains(body, []byte(`"stream":"`+d.Stream+`"`)) && !bytes.Contains(body, []byte(`"duplicate"`)) &&
		d.dropped.CompareAndSwap(false, true)
}

// ReadBlocker dials real connections (for nats.SetCustomDialer) that,
// while blocking, lose every message of Stream a direct get returns (a
// reply carrying the stream's Nats-Stream header): the read times out, as
// one does while the stream's leader cannot be reached — what a real
// server cannot be made to do to one client's reads alone. Everything
// else passes: the client's publishes, acknowledgements and deliveries.
type ReadBlocker struct {
	// Stream whose reads are lost.
	Stream string

	blocking atomic.Bool
	lost     atomic.Int64
}

// Block starts (true) or stops (false) losing the reads.
func (b *ReadBlocker) Block(on bool) { b.blocking.Store(on) }

// Lost is how many read replies were lost so far.
func (b *ReadBlocker) Lost() int64 { return b.lost.Load() }

// Dial implements nats.CustomDialer.
func (b *ReadBlocker) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, drop: b.isARead}, nil
}

// isARead reports whether a frame is a read of the stream to lose, and
// counts it if it is.
func (b *ReadBlocker) isARead(head, body []byte) bool {
	if !b.blocking.Load() || !bytes.HasPrefix(head, []byte("HMSG ")) {
		return false
	}
	hdrLen := 0
	if f := bytes.Fields(head); len(f) >= 2 {
		hdrLen, _ = strconv.Atoi(string(f[len(f)-2]))
	}
	if hdrLen > len(body) || !bytes.Contains(body[:hdrLen], []byte("Nats-Stream: "+b.Stream+"\r\n")) {
		return false
	}
	b.lost.Add(1)
	return true
}

// dropConn reads whole protocol frames from the server and hands them on,
// less those drop says to lose.
type dropConn struct {
	net.Conn
	drop    func(head, body []byte) bool
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

// frame moves every complete frame from in to out, except those to drop.
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
			if c.drop(line, body) {
				c.in = c.in[end:]
				continue
			}
		}
		c.out = append(c.out, c.in[:end]...)
		c.in = c.in[end:]
	}
}
