package limits_test

import (
	"fmt"

	"github.com/windlass-dev/windlass/limits"
)

func ExampleParse() {
	c, err := limits.Parse([]byte(`
default: {max_in_flight: 200}
tools:
  transfer_funds:
    default: {rate: 1/s}
    keys:
      acme: {rate: 10/s, burst: 20}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"acme", "someone"} {
		l := c.For("transfer_funds", key)
		fmt.Printf("%s: %s, at most %d in flight\n", key, l.Rate, l.MaxInFlight)
	}
	// Output:
	// acme: 10/s burst 20, at most 200 in flight
	// someone: 1/s, at most 200 in flight
}
