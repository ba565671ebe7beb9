package payload

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// TestUploadWaitsForTheServerEveryWindow: the object store reads an upload
// chunk by chunk; the paced reader waits for the server (flush) each time
// a window's worth has been handed out, before handing out more, and an
// upload whose flush fails ends with that error.
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
	p = &pacedReader{r: bytes.NewReader(data), window: window, flush: func() error { return refused }}
	var err error
	for read = 0; err == nil; {
		var n int
		n, err = p.Read(buf)
		read += n
	}
	if !errors.Is(err, refused) || read != window {
		t.Fatalf("with a failing flush: read %d bytes, then %v; want %d, then the flush's error", read, err, window)
	}
}
