package approval

import "time"

// SetUnknownToolWait sets how long a call over the default bound whose
// tool the registry does not list waits to be held, until restore.
func SetUnknownToolWait(d time.Duration) (restore func()) {
	old := unknownToolWait.Swap(int64(d))
	return func() { unknownToolWait.Store(old) }
}
