package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/receipt"
)

// ReceiptMode says which calls' results a worker signs an execution
// receipt for (package receipt; see the package doc, "Execution
// receipts").
type ReceiptMode int

const (
	// ReceiptsGated signs a receipt for every call that ran under an
	// approval service's release, and no other: the default.
	ReceiptsGated ReceiptMode = iota
	// ReceiptsAll signs a receipt for every call the worker answers. It
	// costs about 50 µs of a core per call (an Ed25519 signature and the
	// arguments' canonical hash).
	ReceiptsAll
)

// WithReceipts sets which of this tool's calls get a receipt (see
// [ReceiptMode]); the worker's Config.Receipts applies when it signs more.
func WithReceipts(m ReceiptMode) ToolOption { return func(c *toolConfig) { c.receipts = m } }

// receipted reports whether the answer of d gets a receipt: a call that
// ran under a release always does; another only when its worker or its
// tool signs every call.
func (w *Worker) receipted(d *delivery) bool {
	if d.rel != nil {
		return true
	}
	return d.token != "" && (w.cfg.Receipts == ReceiptsAll || d.t.cfg.receipts == ReceiptsAll)
}

// signReceipt signs the receipt of m, the result message of d, and puts it
// in m's Windlass-Receipt header: over the exact body m carries, so it is
// signed again whenever the body changes (see resultMessage and shrink).
// started is when the tool started (zero when it did not run).
func (w *Worker) signReceipt(d *delivery, m *nats.Msg, started time.Time) {
	r := receipt.Receipt{CallID: d.call.ID, Tool: d.t.spec.Name, SpecHash: d.t.hash, ArgsHash: argsHashOf(d), ResultHash: receipt.ResultHash(m.Data)}
	if !started.IsZero() {
		r.StartedAt, r.FinishedAt = started, d.finishedAt
	}
	if d.rel != nil {
		r.ReleaseID, r.ApprovedBy = d.releaseID, d.rel.ApprovedBy
	}
	h, err := receipt.Encode(w.signer.Sign(r))
	if err != nil { // a Receipt always encodes
		d.logger().ErrorContext(d.ctx, "worker: could not encode the receipt; answering without it", "error", err)
		return
	}
	m.Header[layout.HeaderReceipt] = []string{h}
}

// argsHashOf is the canonical hash of the arguments the call ran with: the
// release's (the worker checked they are the ones it carries), or computed;
// empty when they were never read (by reference, answered before), or are
// over the tool's bound on values.
func argsHashOf(d *delivery) string {
	if d.rel != nil {
		return d.rel.ArgsHash
	}
	if d.call.ArgumentsRef != nil {
		return ""
	}
	// Within the tool's bound: arguments refused for their values (rule
	// values) are not decoded for their receipt either.
	h, err := release.ArgumentsHashWithin(d.call.Arguments, d.t.spec.ArgumentValueLimit())
	if err != nil {
		return ""
	}
	return h
}

// releaseID identifies a release in receipts: the hex SHA-256 of its
// header value.
func releaseID(header string) string {
	sum := sha256.Sum256([]byte(header))
	return hex.EncodeToString(sum[:])
}

// keyRefresh is how often a running worker publishes its receipt key
// again, to push its retention forward.
const keyRefresh = time.Hour

// publishReceiptKey publishes the worker's receipt key in the registry,
// retrying for up to a write timeout's worth of attempts.
func (w *Worker) publishReceiptKey(ctx context.Context) error {
	return retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, For: 5 * retry.WriteTimeout, PerAttempt: retry.WriteTimeout}, func(ctx context.Context) error {
		return w.cfg.Registry.PublishReceiptKey(ctx, w.signer.PublicKey(), w.cfg.ID, w.cfg.ReceiptKeyRetention)
	})
}

// keepReceiptKey publishes the worker's receipt key when Run starts and
// again every keyRefresh (and at stop, through the returned function), so
// that the key outlives the worker by its retention. Without a registry
// receipts are signed with a key nobody can look up; it says so.
func (w *Worker) keepReceiptKey(ctx context.Context, log *slog.Logger) (stop func(), err error) {
	if w.cfg.Registry == nil {
		log.WarnContext(ctx, "worker: no registry: the receipt key is not published, so receipts verify only against the key given out of band", "receipt_key_id", w.signer.KeyID())
		return func() {}, nil
	}
	if err := w.publishReceiptKey(ctx); err != nil {
		return nil, err
	}
	log.InfoContext(ctx, "worker: receipt key published", "receipt_key_id", w.signer.KeyID())
	refreshCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(min(keyRefresh, w.cfg.ReceiptKeyRetention/4))
		defer t.Stop()
		for {
			select {
			case <-refreshCtx.Done():
				return
			case <-t.C:
				if err := w.publishReceiptKey(refreshCtx); err != nil && refreshCtx.Err() == nil {
					log.WarnContext(refreshCtx, "worker: refreshing the receipt key's retention failed; trying again later", "error", err)
				}
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		// The last refresh: the retention runs from the worker's end.
		pctx, cancelPublish := context.WithTimeout(context.WithoutCancel(ctx), retry.WriteTimeout)
		defer cancelPublish()
		if err := w.cfg.Registry.PublishReceiptKey(pctx, w.signer.PublicKey(), w.cfg.ID, w.cfg.ReceiptKeyRetention); err != nil {
			log.WarnContext(ctx, "worker: the receipt key's last refresh failed; it stays published until its retention from the previous one", "error", err)
		}
	}, nil
}
