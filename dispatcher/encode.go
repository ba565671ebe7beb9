package dispatcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
)

// overMaxPayload is the payload_too_large refusal of a call whose message,
// data, is over the NATS server's max payload with its arguments by
// reference already: what is too large is the rest, its metadata (the
// one field without a bound of its own), which no reference carries — a
// publish would fail the same way each time (nats.ErrMaxPayload), and its
// caller would be told the fleet is unavailable. nil when the message
// fits; a gated call's leaves room for its release, as prepare counts it.
func (d *Dispatcher) overMaxPayload(p *prepared, data []byte) error {
	m := p.msg
	m.Data = data
	size := layout.MessageSize(&m)
	if p.gated {
		size += release.Reserve
	}
	limit := d.cfg.Conn.MaxPayload()
	if limit <= 0 || int64(size) <= limit {
		return nil
	}
	meta, _ := json.Marshal(p.call.Metadata)
	return &windlass.CallError{Code: windlass.CodePayloadTooLarge, Message: fmt.Sprintf(
		"The call to %q is %d bytes with its arguments by reference, over the NATS server's max payload of %d bytes: its metadata (%d bytes) is too large for a call; nothing was queued. Send less metadata.",
		p.call.Name, size, limit, len(meta))}
}

// encodeCall is json.Marshal(call) for a call prepare has checked, in one
// buffer and without re-scanning the arguments: its id and name are
// validated (printable ASCII without '"' or '\', and the tool-name
// alphabet), a spec hash or key that needs escaping (a caller's own, see
// WithSpecHash and WithKey) or a deadline outside years 0-9999 takes json.Marshal, and its arguments were parsed by the
// schema's validation, so they are valid JSON and are copied as they are.
// Metadata, free text, goes through encoding/json.
func encodeCall(call windlass.ToolCall) ([]byte, error) {
	if y := call.Deadline.Year(); !call.Deadline.IsZero() && (y < 0 || y > 9999) || !plain(call.SpecHash) || !plain(call.Key) {
		return json.Marshal(call) // its own errors and escaping
	}
	args := bytes.TrimSpace(call.Arguments)
	b := make([]byte, 0, 128+len(args)+len(call.ID)+len(call.SpecHash))
	b = append(b, `{"id":"`...)
	b = append(b, call.ID...)
	b = append(b, `","name":"`...)
	b = append(b, call.Name...)
	b = append(b, `","arguments":`...)
	if len(args) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, args...)
	}
	if !call.Deadline.IsZero() {
		b = append(b, `,"deadline":"`...)
		b = call.Deadline.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if call.SpecHash != "" {
		b = append(b, `,"spec_hash":"`...)
		b = append(b, call.SpecHash...)
		b = append(b, '"')
	}
	if len(call.Metadata) > 0 {
		m, err := json.Marshal(call.Metadata)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"metadata":`...)
		b = append(b, m...)
	}
	if call.Key != "" {
		b = append(b, `,"key":"`...)
		b = append(b, call.Key...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// plain reports whether s can stand in a JSON string as it is: printable
// ASCII without '"', '\\' or the characters encoding/json escapes for HTML.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
