package textcut_test

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/windlass-dev/windlass/internal/textcut"
)

func ExampleCut() {
	long := strings.Repeat("é", 40) // 80 bytes
	cut := textcut.Cut(long, 50)
	fmt.Println(cut, len(cut) <= 50, utf8.ValidString(cut))
	fmt.Println(textcut.Cut("short", 50))
	// Output:
	// ééééééééé… [truncated: 80 bytes in all] true true
	// short
}
