package fleettest

import (
	"net"
	"sync"
	"sync/atomic"
)

// DeafDialer dials real connections (for nats.SetCustomDialer) whose reads
// stop once Deafen is called, until the connection is closed: what the
// client would see were the server's answers lost on the way (a publish's
// acknowledgement among them), which a real server cannot be made to do
// to one client. What a read gets after Deafen is dropped.
type DeafDialer struct{ deaf atomic.Bool }

// Deafen makes every connection of d hear nothing from now on.
func (d *DeafDialer) Deafen() { d.deaf.Store(true) }

// Dial implements nats.CustomDialer.
func (d *DeafDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &deafConn{Conn: c, d: d, closed: make(chan struct{})}, nil
}

type deafConn struct {
	net.Conn
	d      *DeafDialer
	once   sync.Once
	closed chan struct{}
}

func (c *deafConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.d.deaf.Load() { // what arrived since is lost
		<-c.closed
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *deafConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
