// Package payload moves the payloads too large for a message — a call's
// arguments, a result's content and value — through the fleet's JetStream
// object store (layout.PayloadsBucket), and back. The message then carries
// a [windlass.PayloadRef]: the bucket, the object's name (derived from the
// call id), its size and its SHA-256. A reader uses an object only when
// its size and digest are the reference's; anything else is
// [ErrUnreadable], answered as an error and never used as data.
//
// Why the object store: it needs no server beyond NATS, its objects are
// replicated like the streams, and its bucket's TTL (the results' max age
// and the duplicate window) removes every object, also one whose message
// was never stored (a refused call, a worker lost after its upload), with
// no sweeper of ours.
package payload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
)

// Defaults of the limits the dispatcher, worker and approval configs take
// (InlineLimit, PayloadLimit).
const (
	// DefaultInline is the largest message (body and headers) sent inline:
	// a quarter of the NATS server's default max payload (1 MiB), which
	// leaves room for headers and keeps large bodies off the streams' hot
	// path.
	DefaultInline = 256 << 10
	// DefaultMax is the largest payload sent by reference.
	DefaultMax = 64 << 20
)

// chunkSize is the object store's chunk: larger than the client's default
// (128 KiB) for fewer messages per object, and below any max payload a
// fleet runs with (see Store.chunk).
const chunkSize = 256 << 10

// ErrUnreadable is the error of an object that cannot be used: it is gone
// (past the bucket's lifetime, or never stored) or its size or digest is
// not the reference's. It is permanent: asking again reads the same.
var ErrUnreadable = errors.New("payload: unreadable")

// TooLargeError reports a payload over the limit by reference.
type TooLargeError struct {
	Size, Limit int64
}

// Error implements error.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("payload: %d bytes, over the limit of %d bytes", e.Size, e.Limit)
}

// Store puts and gets payloads in the fleet's payloads bucket.
type Store struct {
	obs   jetstream.ObjectStore
	flush func(context.Context) error // waits for the server to have read what the bucket's connection sent; nil: uploads unpaced (see pacedReader)
	chunk int
}

// New returns a store over the payloads bucket obs (see
// layout.EnsurePayloads) on the connection nc: the server's max payload
// bounds the object store's chunks, and uploads are paced on it so the
// connection's other messages do not wait behind a whole object (see
// pacedReader). A nil nc sends uploads unpaced, in chunks of chunkSize.
func New(obs jetstream.ObjectStore, nc *nats.Conn) *Store {
	s := &Store{obs: obs, chunk: chunkSize}
	if nc != nil {
		if maxMessage := nc.MaxPayload(); maxMessage > 0 && int64(s.chunk) > maxMessage/2 {
			s.chunk = int(maxMessage / 2)
		}
		s.flush = func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, retry.WriteTimeout)
			defer cancel()
			return nc.FlushWithContext(ctx)
		}
	}
	return s
}

// paceWindow is how many bytes of an upload may be on their way to the
// server, in the client's socket and the server's, before the upload
// waits for the server to have read them (a flush: PING, then PONG once
// the server has processed what came before it).
//
// Why pace: the object store hands every chunk of an object to the
// connection at once (asynchronous publishes, thousands pending), and the
// connection sends in order. A message published meanwhile on the same
// connection, such as a worker's in-progress acknowledgement of the very
// call whose result is uploading, reached the server only behind the bytes
// queued before it: behind 48 MiB, 1.25–1.5 s in three runs on a loaded
// machine with the race detector, as long as a short ack wait, and the
// call was redelivered while its result uploaded (the tool ran again). A
// window of 1 MiB bounds that wait to what the server reads of 1 MiB, for
// one round trip per MiB, during which nothing of the upload is sent: on
// a local network that costs nothing measurable (BENCHMARKS.md, "Payloads
// by reference"), but it caps an upload at 1 MiB per round trip — about
// 20 MiB/s over a link with 50 ms round trips. The dispatcher's and the
// approval service's uploads are paced too: their connections carry
// other callers' calls and answers.
const paceWindow = 1 << 20

// pacedReader reads an upload for the object store, waiting after every
// window bytes for the server to have read what was sent (flush). The
// pacing is best effort: a flush that fails (times out on a server slow to
// answer, or the connection broke) does not fail the upload, which fails
// on its own publishes if the connection is gone; failing it would send
// the whole object again, slower still.
type pacedReader struct {
	r       io.Reader
	flush   func() error
	window  int
	pending int // bytes read since the last flush
}

// Read implements io.Reader.
func (p *pacedReader) Read(b []byte) (int, error) {
	if p.pending >= p.window {
		_ = p.flush() // best effort (see pacedReader)
		p.pending = 0
	}
	n, err := p.r.Read(b)
	p.pending += n
	return n, err
}

// paced returns r, paced on the store's connection while ctx lasts.
func (s *Store) paced(ctx context.Context, r io.Reader) io.Reader {
	if s.flush == nil {
		return r
	}
	return &pacedReader{r: r, window: paceWindow, flush: func() error { return s.flush(ctx) }}
}

// putPolicy retries an upload that failed (a reconnect, a leader change)
// for up to 30 s; each attempt writes the whole object again, under a new
// chunk subject.
var putPolicy = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, For: 30 * time.Second}

// Put stores data as the object of a call's payload of a kind
// (layout.PayloadArguments, PayloadContent, PayloadData) under a name of
// its own, and returns its reference.
func (s *Store) Put(ctx context.Context, kind, callID string, data []byte) (windlass.PayloadRef, error) {
	sum := sha256.Sum256(data)
	return s.put(ctx, kind, callID, int64(len(data)), sum[:], func() io.Reader { return bytes.NewReader(data) })
}

// PutString is Put of a string, without copying it.
func (s *Store) PutString(ctx context.Context, kind, callID, data string) (windlass.PayloadRef, error) {
	h := sha256.New()
	var buf [32 << 10]byte
	for rest := data; rest != ""; {
		n := copy(buf[:], rest)
		h.Write(buf[:n])
		rest = rest[n:]
	}
	return s.put(ctx, kind, callID, int64(len(data)), h.Sum(nil), func() io.Reader { return strings.NewReader(data) })
}

// put uploads the size bytes whose SHA-256 is sum that each call of
// open reads, retrying (see putPolicy).
func (s *Store) put(ctx context.Context, kind, callID string, size int64, sum []byte, open func() io.Reader) (windlass.PayloadRef, error) {
	ref := windlass.PayloadRef{Bucket: layout.PayloadsBucket, Name: layout.PayloadObject(kind, callID, nuid.Next()),
		Size: size, SHA256: hex.EncodeToString(sum)}
	meta := jetstream.ObjectMeta{Name: ref.Name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(s.chunk)}}
	err := retry.Do(ctx, putPolicy, func(ctx context.Context) error {
		_, err := s.obs.Put(ctx, meta, s.paced(ctx, open()))
		return err
	})
	if err != nil {
		return windlass.PayloadRef{}, fmt.Errorf("payload: store %s: %w", ref.Name, err)
	}
	return ref, nil
}

// getPolicy retries a download that failed for the connection or the
// server (not for the object) for up to 30 s.
var getPolicy = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, For: 30 * time.Second}

// Get fetches the object ref points at, refusing one over limit before
// reading it. It returns the payload only when it has exactly ref.Size
// bytes whose SHA-256 is ref.SHA256; an object that is gone or differs
// is an error wrapping [ErrUnreadable]; one over limit a
// *[TooLargeError]. Any other error is the connection's or the server's,
// after retrying: asking later may succeed.
func (s *Store) Get(ctx context.Context, ref windlass.PayloadRef, limit int64) ([]byte, error) {
	if err := ref.Validate(); err != nil {
		return nil, fmt.Errorf("%w: reference: %w", ErrUnreadable, err)
	}
	if ref.Bucket != layout.PayloadsBucket {
		return nil, fmt.Errorf("%w: object %s is in bucket %q, not the fleet's %q", ErrUnreadable, ref.Name, ref.Bucket, layout.PayloadsBucket)
	}
	if limit > 0 && ref.Size > limit {
		return nil, &TooLargeError{Size: ref.Size, Limit: limit}
	}
	return retry.Value(ctx, getPolicy, func(ctx context.Context) ([]byte, error) {
		data, err := s.get(ctx, ref)
		if errors.Is(err, ErrUnreadable) {
			return nil, retry.Permanent(err)
		}
		return data, err
	})
}

// minFetchRate is the slowest download, in bytes a second, that an
// attempt of Get waits out when its caller set no deadline (fetchTime).
const minFetchRate = 1 << 20

// fetchTime bounds one attempt to download an object of size bytes when
// its caller set no deadline: 5 s to ask (retry.WriteTimeout, as long as
// nats.go's own default), and the object at minFetchRate (55 s in all for
// 50 MiB). Without it nats.go bounds the whole
// download by its default API timeout, 5 s however large the object, which
// a 50 MiB object on a loaded machine or a slow link does not meet; every
// attempt then starts again from the first byte, and each fails alike, so
// a result that is there was answered "unavailable".
func fetchTime(size int64) time.Duration {
	return retry.WriteTimeout + time.Duration(size/minFetchRate)*time.Second
}

// get is one attempt of Get.
func (s *Store) get(ctx context.Context, ref windlass.PayloadRef) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fetchTime(ref.Size))
		defer cancel()
	}
	res, err := s.obs.Get(ctx, ref.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: object %s is gone (past the bucket's lifetime, or never stored)", ErrUnreadable, ref.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("payload: fetch %s: %w", ref.Name, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return nil, fmt.Errorf("payload: fetch %s: %w", ref.Name, err)
	}
	if int64(info.Size) != ref.Size {
		return nil, fmt.Errorf("%w: object %s has %d bytes, its reference says %d", ErrUnreadable, ref.Name, info.Size, ref.Size)
	}
	// One buffer of the exact size: reading grows nothing.
	data := make([]byte, ref.Size)
	if _, err := io.ReadFull(res, data); err != nil {
		return nil, fmt.Errorf("payload: fetch %s: %w", ref.Name, err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != ref.SHA256 {
		return nil, fmt.Errorf("%w: object %s has SHA-256 %s, its reference says %s", ErrUnreadable, ref.Name, got, ref.SHA256)
	}
	return data, nil
}

// Delete removes an object a message that was not stored pointed at (a
// resubmit's, a second answer's), best effort: the bucket's lifetime
// removes it anyway.
func (s *Store) Delete(ctx context.Context, ref windlass.PayloadRef) {
	ctx, cancel := context.WithTimeout(ctx, retry.WriteTimeout)
	defer cancel()
	_ = s.obs.Delete(ctx, ref.Name)
}
