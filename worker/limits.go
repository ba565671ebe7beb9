package worker

import (
	"encoding/json"
	"fmt"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/textcut"
)

// A result too large for a message travels by reference (see
// byReference), up to the tool's limit (Config.PayloadLimit,
// WithPayloadLimit). A tool's result over that limit is answered
// result_too_large: the tool ran and finished, and running it again would
// give the same result, so the call is answered and acked, never left for
// redelivery. Texts of events and records (progress, a retrying error, a
// dead call's error, a refusal's detail) are cut instead: they are advice,
// and must neither fail a call nor fill a stream.

// maxEventText bounds each text of an event or record a worker publishes.
const maxEventText = 16 << 10

// tooLarge is the answer that replaces a result of size bytes, over limit:
// result_too_large, with the attempt's facts (worker, attempt, start,
// duration) kept. It returns the answer and its encoding.
func (w *Worker) tooLarge(result windlass.ToolResult, size int, limit int64) (windlass.ToolResult, []byte) {
	text := fmt.Sprintf("Tool %q ran and finished (attempt %d), but its result is %d bytes, over the limit of %d bytes for a result, so it cannot be delivered. The call is not run again; have the tool return less, or a reference to the data.",
		result.Name, result.Attempt, size, limit)
	if result.IsError {
		text = fmt.Sprintf("Tool %q failed (attempt %d), and its error is %d bytes, over the limit of %d bytes for a result. The error begins: %s",
			result.Name, result.Attempt, size, limit, textcut.Cut(result.Content, 1<<10))
	}
	answer := windlass.ErrorResult(windlass.ToolCall{ID: result.CallID, Name: result.Name}, windlass.CodeResultTooLarge, text)
	answer.Worker, answer.Attempt, answer.StartedAt, answer.DurationMS = result.Worker, result.Attempt, result.StartedAt, result.DurationMS
	data, _ := json.Marshal(answer) // plain strings and numbers: it encodes
	return answer, data
}
