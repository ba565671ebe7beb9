package windlass_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/mcpserver"
)

const refundCondition = `args.amount > 100.0 || args.to.startsWith("ext_")`

func refundSpec() windlass.Spec {
	return windlass.Spec{Name: "refund", Description: "Refund a payment.", ApprovalCondition: refundCondition,
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}, "to": map[string]any{"type": "string"}}}}
}

// TestApprovalConditionIsPartOfTheSpec: the condition travels in the
// spec's JSON as approval_condition (absent when empty, so the hash of a
// spec without one is unchanged) and changes the spec's hash.
func TestApprovalConditionIsPartOfTheSpec(t *testing.T) {
	t.Parallel()
	s := refundSpec()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"approval_condition":"args.amount \u003e 100.0 || args.to.startsWith(\"ext_\")"`) &&
		!strings.Contains(string(b), `"approval_condition":"args.amount > 100.0 || args.to.startsWith(\"ext_\")"`) {
		t.Errorf("spec JSON %s has no approval_condition", b)
	}
	var back windlass.Spec
	if err := json.Unmarshal(b, &back); err != nil || back.ApprovalCondition != refundCondition || back.Hash() != s.Hash() {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	plain := s
	plain.ApprovalCondition = ""
	if pb, _ := json.Marshal(plain); strings.Contains(string(pb), "approval_condition") {
		t.Errorf("a spec without a condition: %s, want no approval_condition key", pb)
	}
	other := s
	other.ApprovalCondition = `args.amount > 200.0`
	if s.Hash() == plain.Hash() || s.Hash() == other.Hash() {
		t.Errorf("the condition does not change the hash: %s, %s, %s", s.Hash(), plain.Hash(), other.Hash())
	}
}

// TestApprovalConditionIsRefusedWithPositionAndReason: Validate refuses an
// expression that does not compile to a bool, saying where and why, and a
// spec that sets both requires_approval and a condition.
func TestApprovalConditionIsRefusedWithPositionAndReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr         string
		line, column int
		reason       string
	}{
		{`args.amount >`, 1, 14, "Syntax error"},
		{"args.amount > 100.0 &&\n   amount < 5.0", 2, 4, "undeclared reference to 'amount'"},
		{`args.amount * 2.0`, 1, 1, "want bool"},
		{`args.to.startsWith(1)`, 1, 19, "no matching overload"},
	}
	for _, tt := range tests {
		s := refundSpec()
		s.ApprovalCondition = tt.expr
		err := s.Validate()
		var ce *windlass.ConditionError
		if !errors.As(err, &ce) || !errors.Is(err, windlass.ErrInvalidSpec) {
			t.Errorf("Validate(%q) = %v, want a *ConditionError wrapping ErrInvalidSpec", tt.expr, err)
			continue
		}
		if ce.Tool != "refund" || ce.Line != tt.line || ce.Column != tt.column || !strings.Contains(ce.Reason, tt.reason) {
			t.Errorf("Validate(%q) = %+v, want %d:%d %q", tt.expr, ce, tt.line, tt.column, tt.reason)
		}
		if !strings.Contains(err.Error(), "approval_condition") {
			t.Errorf("Validate(%q) = %q: the error does not name the field", tt.expr, err)
		}
	}
	both := refundSpec()
	both.RequiresApproval = true
	if err := both.Validate(); !errors.Is(err, windlass.ErrInvalidSpec) || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("requires_approval and approval_condition: %v, want refused", err)
	}
	if err := refundSpec().Validate(); err != nil {
		t.Errorf("a valid condition: %v", err)
	}
	if _, err := windlass.Func("refund", func(_ context.Context, in struct{}) (string, error) { return "", nil }, windlass.WithApprovalCondition("args.")); err == nil {
		t.Error("Func accepted an invalid condition")
	}
}

func TestNeedsApproval(t *testing.T) {
	t.Parallel()
	gatedAll := windlass.Spec{Name: "pay", RequiresApproval: true}
	free := windlass.Spec{Name: "echo"}
	tests := []struct {
		name    string
		spec    windlass.Spec
		args    string
		want    bool
		wantErr bool
	}{
		{"requires_approval", gatedAll, `{"amount":1}`, true, false},
		{"no gate", free, `{"amount":1000}`, false, false},
		{"below", refundSpec(), `{"amount":20,"to":"acct"}`, false, false},
		{"above", refundSpec(), `{"amount":200,"to":"acct"}`, true, false},
		{"external", refundSpec(), `{"amount":1,"to":"ext_x"}`, true, false},
		{"missing field: fail closed", refundSpec(), `{"to":"acct"}`, true, true},
		{"wrong type: fail closed", refundSpec(), `{"amount":"many","to":"acct"}`, true, true},
		{"not an object: fail closed", refundSpec(), `[1]`, true, true},
		{"invalid condition: fail closed", windlass.Spec{Name: "x", ApprovalCondition: "args."}, `{}`, true, true},
		// Not decoded for the condition: more values than the tool's bound.
		{"too many values: fail closed", bounded(refundSpec(), 4), `{"amount":1,"to":"acct","x":[1,2]}`, true, true},
		{"values within the bound", bounded(refundSpec(), 4), `{"amount":1,"to":"acct","x":[]}`, false, false},
	}
	for _, tt := range tests {
		got, err := tt.spec.NeedsApproval(json.RawMessage(tt.args))
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s: NeedsApproval(%s) = %v, %v; want %v (error %v)", tt.name, tt.args, got, err, tt.want, tt.wantErr)
		}
	}
	if !refundSpec().Gated() || !gatedAll.Gated() || free.Gated() {
		t.Error("Gated")
	}
}

// bounded is spec with its bound on argument values set to n.
func bounded(spec windlass.Spec, n int) windlass.Spec {
	spec.MaxArgumentValues = n
	return spec
}

// TestApprovalConditionIsNotShownToModels: no model-facing rendering of a
// spec (each provider style, the MCP tool annotations) carries the
// condition; the MCP annotations present the tool as gated.
func TestApprovalConditionIsNotShownToModels(t *testing.T) {
	t.Parallel()
	s := refundSpec()
	for _, style := range windlass.Styles {
		def, err := s.Schema(style)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(def)
		if strings.Contains(string(b), "approval_condition") || strings.Contains(string(b), "startsWith") {
			t.Errorf("%s definition leaks the condition: %s", style, b)
		}
	}
	a := mcpserver.Annotations(s)
	if b, _ := json.Marshal(a); a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint || strings.Contains(string(b), "startsWith") {
		t.Errorf("MCP annotations of a conditionally gated tool: %s", b)
	}
}
