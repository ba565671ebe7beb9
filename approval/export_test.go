package approval

import "time"

// SetUnknownToolWait sets how long a call over the default bound whose
// tool the registry does not list waits to be held, until restore.
func SetUnknownToolWait(d time.Duration) (restore func()) {
	old := unknownToolWait.Swap(int64(d))
	return func() { unknownToolWait.Store(old) }
}

// SetBeforeRefusalAnswer makes s run f between a refusal's claim of a
// call's id and its answer.
func SetBeforeRefusalAnswer(s *Service, f func(id string)) { s.beforeRefusalAnswer.Store(&f) }
