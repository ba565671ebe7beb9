package gatecond_test

import (
	"encoding/json"
	"fmt"

	"github.com/windlass-dev/windlass/internal/gatecond"
)

func Example() {
	c, err := gatecond.Compile(`args.amount > 100.0 || args.to.startsWith("ext_")`)
	if err != nil {
		panic(err)
	}
	for _, args := range []string{`{"amount":20,"to":"acct_1"}`, `{"amount":250,"to":"acct_1"}`, `{"amount":5,"to":"ext_bank"}`} {
		gated, err := c.Eval(json.RawMessage(args))
		fmt.Println(args, gated, err)
	}
	_, err = gatecond.Compile("args.amount >\n  100.0 &&")
	fmt.Println(err)
	// Output:
	// {"amount":20,"to":"acct_1"} false <nil>
	// {"amount":250,"to":"acct_1"} true <nil>
	// {"amount":5,"to":"ext_bank"} true <nil>
	// 2:11: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
}
