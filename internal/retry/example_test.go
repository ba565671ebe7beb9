package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/windlass-dev/windlass/internal/retry"
)

// A publish that the stream acknowledges on its third try, under a policy
// stated in one line.
func ExampleDo() {
	tries := 0
	err := retry.Do(context.Background(), retry.Policy{Initial: time.Millisecond, For: time.Second}, func(context.Context) error {
		tries++
		if tries < 3 {
			return errors.New("no acknowledgement")
		}
		return nil
	})
	fmt.Println(tries, err)
	// Output: 3 <nil>
}
