package gatecond_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/internal/gatecond"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEval(t *testing.T) {
	t.Parallel()
	const refund = `args.amount > 100.0 || args.to.startsWith("ext_")`
	tests := []struct {
		name, expr, args string
		want             bool
		wantErr          bool
	}{
		{"below", refund, `{"amount":20,"to":"acct_1"}`, false, false},
		{"above", refund, `{"amount":250.5,"to":"acct_1"}`, true, false},
		{"at the bound", refund, `{"amount":100,"to":"acct_1"}`, false, false},
		{"external account", refund, `{"amount":1,"to":"ext_9"}`, true, false},
		{"int literal against a JSON number", `args.amount > 100`, `{"amount":100.5}`, true, false},
		{"equality across number types", `args.n == 3`, `{"n":3}`, true, false},
		{"missing field is an error", `args.amount > 100.0`, `{}`, false, true},
		{"has() guards an optional field", `has(args.amount) && args.amount > 100.0`, `{}`, false, false},
		{"wrong type is an error", `args.amount > 100.0`, `{"amount":"lots"}`, false, true},
		{"null arguments are an empty object", `size(args) == 0`, `null`, true, false},
		{"no arguments are an empty object", `size(args) == 0`, ``, true, false},
		{"arguments that are not an object", `true`, `[1,2]`, false, true},
		{"undecodable arguments", `true`, `{`, false, true},
		{"nested values", `args.items.exists(i, i.sku == "gold")`, `{"items":[{"sku":"tin"},{"sku":"gold"}]}`, true, false},
		{"lists", `size(args.to) > 2`, `{"to":["a","b","c"]}`, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := gatecond.Compile(tt.expr)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tt.expr, err)
			}
			got, err := c.Eval(json.RawMessage(tt.args))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Eval(%s) = %v, %v; want %v (error %v)", tt.args, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCompileRefusesWithPositionAndReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr       string
		line, column     int
		reasonContaining string
	}{
		{"syntax error", `args.amount >`, 1, 14, "mismatched input"},
		{"second line", "args.amount > 1.0 &&\n  args.to.startsWith(", 2, 22, ""},
		{"unknown variable", `amount > 100.0`, 1, 1, "undeclared reference to 'amount'"},
		{"unknown function", `args.to.shout()`, 1, 14, "undeclared reference to 'shout'"},
		{"not a bool", `args.amount + 1.0`, 1, 1, "want bool"},
		{"dyn is not bool", `args.flag`, 1, 1, "want bool"},
		{"wrong operand types", `"a" > 1.0`, 1, 5, "no matching overload"},
		{"empty", ``, 1, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := gatecond.Compile(tt.expr)
			var ce *gatecond.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Compile(%q) = %v, want a *gatecond.Error", tt.expr, err)
			}
			if ce.Line != tt.line || ce.Column != tt.column || !strings.Contains(ce.Reason, tt.reasonContaining) || ce.Reason == "" {
				t.Errorf("Compile(%q) = %d:%d %q; want %d:%d containing %q", tt.expr, ce.Line, ce.Column, ce.Reason, tt.line, tt.column, tt.reasonContaining)
			}
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("%d:%d: ", tt.line, tt.column)) {
				t.Errorf("Error() = %q, want it to start with line:column", err)
			}
		})
	}
}

// TestCostLimit: an expression that is expensive whatever its input is
// refused at compile time; one made expensive by its arguments stops at
// the limit with ErrCost, quickly, instead of running on.
func TestCostLimit(t *testing.T) {
	t.Parallel()
	// 200^3 = 8 million iterations whatever the arguments.
	list := `[` + strings.Repeat("0,", 199) + `0]`
	hostile := `size(` + list + `.map(a, ` + list + `.map(b, ` + list + `.map(c, a + b + c)))) > 0`
	_, err := gatecond.Compile(hostile)
	var ce *gatecond.Error
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "over the limit") {
		t.Fatalf("Compile(hostile) = %v, want refused for its cost", err)
	}

	// Cheap on small arguments, quadratic in their size.
	c, err := gatecond.Compile(`args.xs.exists(a, args.xs.exists(b, a != b))`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Eval(json.RawMessage(`{"xs":[1,1,1]}`)); err != nil || got {
		t.Fatalf("small arguments: %v, %v; want false, nil", got, err)
	}
	big, _ := json.Marshal(map[string]any{"xs": make([]int, 20000)}) // 400 million pairs
	start := time.Now()
	_, err = c.Eval(big)
	took := time.Since(start)
	if !errors.Is(err, gatecond.ErrCost) {
		t.Fatalf("hostile arguments: %v, want ErrCost", err)
	}
	if took > 5*time.Second {
		t.Errorf("stopping at the cost limit took %s", took)
	}
	t.Logf("hostile arguments stopped after %s: %v", took, err)

	// A long string is charged by its length.
	c, err = gatecond.Compile(`args.s.contains("needle")`)
	if err != nil {
		t.Fatal(err)
	}
	long, _ := json.Marshal(map[string]string{"s": strings.Repeat("hay", 1<<20)})
	if _, err := c.Eval(long); !errors.Is(err, gatecond.ErrCost) {
		t.Errorf("a 3 MiB string: %v, want ErrCost", err)
	}
}

func TestCompileRefusesTooLong(t *testing.T) {
	t.Parallel()
	expr := "true" + strings.Repeat(" && true", gatecond.MaxLength/8)
	var ce *gatecond.Error
	if _, err := gatecond.Compile(expr); !errors.As(err, &ce) || !strings.Contains(ce.Reason, "over the limit") {
		t.Errorf("Compile(%d bytes) = %v, want refused", len(expr), err)
	}
	deep := strings.Repeat("(", 200) + "true" + strings.Repeat(")", 200)
	if _, err := gatecond.Compile(deep); !errors.As(err, &ce) {
		t.Errorf("Compile(200 nested parentheses) = %v, want refused", err)
	}
}

// TestCachedConcurrent evaluates one cached condition from many
// goroutines (the race detector checks the program is shared safely).
func TestCachedConcurrent(t *testing.T) {
	t.Parallel()
	const expr = `args.amount > 100.0`
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c, err := gatecond.Cached(expr)
			if err != nil {
				t.Error(err)
				return
			}
			got, err := c.Eval(json.RawMessage(fmt.Sprintf(`{"amount":%d}`, i*20)))
			if err != nil || got != (i*20 > 100) {
				t.Errorf("amount %d: %v, %v", i*20, got, err)
			}
		})
	}
	wg.Wait()
	a, _ := gatecond.Cached(expr)
	b, _ := gatecond.Cached(expr)
	if a != b {
		t.Error("Cached compiled the same expression twice")
	}
	if _, err := gatecond.Cached(`args.`); err == nil {
		t.Error("Cached accepted an invalid expression")
	}
}
