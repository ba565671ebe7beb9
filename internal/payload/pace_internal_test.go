package payload

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestUploadWaitsForTheServerEveryWindow: the object store reads an upload
// chunk by chunk; the paced reader waits for the server (flush) each time
// a window's worth has been handed out, before handing out more; a flush
// that fails does not end the upload (pacing is best effort).
func TestUploadWaitsForTheServerEveryWindow(t *testing.T) {
	const window, chunk = 1 << 20, 256 << 10
	data := bytes.Repeat([]byte("p"), 5*window+1)
	var read int
	var flushedAt []int
	p := &pacedReader{r: bytes.NewReader(data), window: window, flush: func() error {
		flushedAt = append(flushedAt, read)
		return nil
	}}
	buf := make([]byte, chunk)
	for {
		n, err := p.Read(buf)
		read += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []int{window, 2 * window, 3 * window, 4 * window, 5 * window}
	if read != len(data) || !slices.Equal(flushedAt, want) {
		t.Fatalf("read %d of %d bytes, flushed after %v; want a flush after each of %v", read, len(data), flushedAt, want)
	}

	refused := errors.New("connection closed")
	flushes := 0
	p = &pacedReader{r: bytes.NewReader(data), window: window, flush: func() error { flushes++; return refused }}
	read = 0
	for {
		n, err := p.Read(buf)
		read += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("with a failing flush: %v after %d bytes; want the upload read whole (pacing is best effort)", err, read)
		}
	}
	if read != len(data) || flushes != 5 {
		t.Fatalf("with a failing flush: read %d bytes after %d flushes; want all %d after 5", read, flushes, len(data))
	}
}

// TestStoreUploadsPaced: a store on a connection paces its uploads — a
// payload of a little over three windows, put on a real server, waits for
// the server three times and comes back whole — and one without a
// connection does not.
func TestStoreUploadsPaced(t *testing.T) {
	t.Parallel()
	nc := testserver.StartNATS(t).Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := layout.EnsurePayloads(t.Context(), js, layout.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("w"), 3*paceWindow+1)
	for _, c := range []struct {
		conn    *nats.Conn
		flushes int
	}{{nc, 3}, {nil, 0}} {
		s := New(obs, c.conn)
		var flushes atomic.Int64
		if s.flush != nil {
			flush := s.flush
			s.flush = func(ctx context.Context) error { flushes.Add(1); return flush(ctx) }
		}
		ref, err := s.Put(t.Context(), layout.PayloadContent, "paced", data)
		if err != nil {
			t.Fatal(err)
		}
		back, err := s.Get(t.Context(), ref, 0)
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("connection %v: got %d bytes back, %v; want the %d put", c.conn != nil, len(back), err, len(data))
		}
		if n := flushes.Load(); n != int64(c.flushes) {
			t.Errorf("connection %v: the upload waited for the server %d times; want %d", c.conn != nil, n, c.flushes)
		}
	}
}
