package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/receipt"
	"github.com/windlass-dev/windlass/worker"
)

type echoArgs struct {
	Text string `json:"text"`
}

func echoTool(name string) windlass.Tool {
	return windlass.MustFunc(name, func(_ context.Context, in echoArgs) (string, error) { return in.Text, nil })
}

// storedMsg is the result message stored for callID.
func storedMsg(t *testing.T, f *fleettest.Fleet, callID string) *jetstream.RawStreamMsg {
	t.Helper()
	return fleettest.StoredResult(t, f.JetStream(), callID)
}

func call(t *testing.T, d *dispatcher.Dispatcher, tool, id, text string) windlass.ToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := d.Call(ctx, tool, echoArgs{Text: text}, dispatcher.WithCallID(id))
	if err != nil || r.IsError {
		t.Fatalf("call %s: %v %+v", id, err, r)
	}
	return r
}

// TestReceiptsForEveryCallWhenConfigured: a worker with ReceiptsAll signs
// the result of an ungated call; the receipt verifies against the key the
// worker published, names the arguments' canonical hash and no release,
// and still verifies once the worker is gone; once its key is no longer
// published, it fails on the key.
func TestReceiptsForEveryCallWhenConfigured(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	w := f.StartWorker(worker.Config{Receipts: worker.ReceiptsAll}, echoTool("echo"))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "echo")
	res := call(t, d, "echo", "all-1", "hello")

	m := storedMsg(t, f, "all-1")
	checker := receipt.NewChecker(f.Registry())
	r, err := checker.Check(t.Context(), "all-1", m.Header.Get(layout.HeaderReceipt), m.Data)
	if err != nil {
		t.Fatalf("the receipt of an ungated call of a ReceiptsAll worker: %v", err)
	}
	wantArgs, _ := release.ArgumentsHash([]byte(`{"text":"hello"}`))
	switch {
	case r.ArgsHash != wantArgs || r.ReleaseID != "" || len(r.ApprovedBy) != 0:
		t.Errorf("receipt args %s release %q %v, want args %s and no release", r.ArgsHash, r.ReleaseID, r.ApprovedBy, wantArgs)
	case r.Worker != w.ID() || r.Tool != "echo" || !r.StartedAt.Equal(res.StartedAt) || r.FinishedAt.Before(r.StartedAt):
		t.Errorf("receipt %+v, result %+v", r, res)
	}

	// The worker is gone: its key is not.
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := checker.Check(t.Context(), "all-1", m.Header.Get(layout.HeaderReceipt), m.Data); err != nil {
		t.Fatalf("the receipt no longer verifies once its worker stopped: %v", err)
	}
	// Past the key's retention (its Redis key gone): the key check fails.
	if err := f.RedisClient().Del(t.Context(), "windlass:{registry}:receiptkey:"+r.KeyID).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = checker.Check(t.Context(), "all-1", m.Header.Get(layout.HeaderReceipt), m.Data)
	if receipt.CheckOf(err) != receipt.CheckKey || !errors.Is(err, receipt.ErrKeyNotFound) {
		t.Fatalf("a receipt whose key is not published: err %v, want the key check failed", err)
	}
}

// TestNoReceiptForUngatedCallsByDefault: a default worker signs no
// receipt for an ungated tool's calls (the hot path pays nothing), but
// does for a tool registered WithReceipts(ReceiptsAll).
func TestNoReceiptForUngatedCallsByDefault(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	f.StartWorker(worker.Config{}, echoTool("plain"), fleettest.WithToolOptions(echoTool("audited"), worker.WithReceipts(worker.ReceiptsAll)))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "plain", "audited")
	call(t, d, "plain", "plain-1", "x")
	call(t, d, "audited", "audited-1", "y")
	if h := storedMsg(t, f, "plain-1").Header.Get(layout.HeaderReceipt); h != "" {
		t.Errorf("an ungated call of a default worker got a receipt: %.80s", h)
	}
	m := storedMsg(t, f, "audited-1")
	if _, err := receipt.NewChecker(f.Registry()).Check(t.Context(), "audited-1", m.Header.Get(layout.HeaderReceipt), m.Data); err != nil {
		t.Errorf("a WithReceipts(ReceiptsAll) tool's call: %v", err)
	}
}

// TestReceiptCountsTowardsTheInlineLimit: a result that fits inline only
// without its receipt goes by reference, and its receipt signs the stored
// stub; the caller gets the whole result.
func TestReceiptCountsTowardsTheInlineLimit(t *testing.T) {
	t.Parallel()
	f := fleettest.New(t)
	f.StartWorker(worker.Config{Receipts: worker.ReceiptsAll, InlineLimit: 4096}, echoTool("echo"))
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitCatalog(t, d, "echo")
	text := strings.Repeat("a", 1600) // as content and value, about 3.6 KB with its headers; about 4.4 KB with the receipt
	res := call(t, d, "echo", "near-1", text)
	if res.Content != text {
		t.Fatalf("the caller got %d bytes, want %d", len(res.Content), len(text))
	}
	m := storedMsg(t, f, "near-1")
	if !strings.Contains(string(m.Data), `_ref"`) {
		t.Fatalf("stored inline (%d bytes with headers?): %.200s", len(m.Data), m.Data)
	}
	if _, err := receipt.NewChecker(f.Registry()).Check(t.Context(), "near-1", m.Header.Get(layout.HeaderReceipt), m.Data); err != nil {
		t.Fatalf("the receipt of a result by reference: %v", err)
	}
}
