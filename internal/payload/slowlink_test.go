package payload_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestGetOverASlowLink: an object that takes longer to download than
// nats.go's default API timeout (5 s) comes back whole when the caller set
// no deadline (Status, Result, a GET of the HTTP API without one): the
// download is bounded by the object's size, not by 5 s for the whole of
// it, which failed every attempt alike and answered a result that is
// there "unavailable". The link is a real connection to a real server
// through a proxy that sends the server's bytes at 1.5 MiB/s: 12 MiB take
// about 8 s.
func TestGetOverASlowLink(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	fast, _ := storeOver(t, srv.Connect(t))
	data := []byte(strings.Repeat("slow link ", 12<<20/10))
	ref, err := fast.Put(t.Context(), layout.PayloadData, "c1", data)
	if err != nil {
		t.Fatal(err)
	}
	slowConn, err := nats.Connect(throttled(t, srv.URL(), 3<<19))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slowConn.Close)
	slow, _ := storeOver(t, slowConn)
	start := time.Now()
	got, err := slow.Get(t.Context(), ref, 0) // no deadline
	if err != nil || string(got) != string(data) {
		t.Fatalf("Get over the slow link = %d bytes, %v after %s; want the object whole", len(got), err, time.Since(start).Round(time.Millisecond))
	}
	if took := time.Since(start); took < 5*time.Second {
		t.Logf("the download took %s: not past the 5 s it is about (the link was not slow enough to show it)", took.Round(time.Millisecond))
	}
}

// throttled starts a TCP proxy to the NATS server at url that passes the
// client's bytes as they come and the server's at bytesPerSecond, and
// returns its URL; it stops when the test ends.
func throttled(t *testing.T, url string, bytesPerSecond int) string {
	t.Helper()
	target := strings.TrimPrefix(url, "nats://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(server, client); _ = server.Close() })
			wg.Go(func() { copyAtRate(client, server, bytesPerSecond); _ = client.Close() })
		}
	})
	return "nats://" + ln.Addr().String()
}

// copyAtRate copies src to dst at no more than bytesPerSecond, in pieces
// of 16 KiB, each sent no earlier than the rate allows.
func copyAtRate(dst io.Writer, src io.Reader, bytesPerSecond int) {
	buf := make([]byte, 16<<10)
	start, sent := time.Now(), 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			sent += n
			if due := start.Add(time.Duration(sent) * time.Second / time.Duration(bytesPerSecond)); time.Until(due) > 0 {
				time.Sleep(time.Until(due)) // the link's speed, not a wait for an event
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
