package integration_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/receiptread"
	"github.com/windlass-dev/windlass/internal/streamread"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/receipt"
	"github.com/windlass-dev/windlass/registry"
)

// TestApprovalRoleReadsResults: the approval user of
// deploy/nats/accounts.conf may read a call's result the way the
// reviewer's console reads it (GET /v1/approvals/{id}/result, through
// streamread: a direct get, then the stream leader's message API when a
// replica has none) and the way its receipt endpoint checks it
// (GET /v1/approvals/{id}/receipt, receiptread), with no permissions
// violation, and finds a result a worker published.
func TestApprovalRoleReadsResults(t *testing.T) {
	ps := startPermServer(t)
	errs := make(chan error, 16)
	nc := ps.connect(t, "approval", errs)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), layout.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	// None yet: both reads are made (the leader confirms the replica's none).
	if _, err := streamread.FirstMsg(t.Context(), nc, stream, layout.ResultByCall("call-1")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("read a missing result as the approval role = %v, want ErrMsgNotFound", err)
	}
	wnc := ps.connect(t, "worker", errs)
	wjs, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(windlass.ToolResult{CallID: "call-1", Content: "done"})
	if _, err := wjs.PublishMsg(t.Context(), &nats.Msg{Subject: layout.ResultSubject("dispatcher-a", "call-1"), Data: data}); err != nil {
		t.Fatal(err)
	}
	m, err := streamread.FirstMsg(t.Context(), nc, stream, layout.ResultByCall("call-1"))
	if err != nil || string(m.Data) != string(data) {
		t.Fatalf("read the result as the approval role = %v %v", err, m)
	}
	reg, err := registry.New(registry.Config{Client: testserver.StartRedis(t).Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := receiptread.Check(t.Context(), nc, stream, reg, "call-1"); err != nil || receipt.CheckOf(c.Err) != receipt.CheckMissing {
		t.Fatalf("check the result's receipt as the approval role = %v, %v; want the check made, failing on missing (the result has none)", c.Err, err)
	}
	if _, err := receiptread.Check(t.Context(), nc, stream, reg, "no-such-call"); !errors.Is(err, receiptread.ErrNoResult) {
		t.Fatalf("check a missing result's receipt as the approval role = %v, want ErrNoResult", err)
	}
	for _, c := range []*nats.Conn{nc, wnc} {
		if v := violations(t, c, errs); len(v) > 0 {
			t.Errorf("permissions violations: %v", v)
		}
	}
}
