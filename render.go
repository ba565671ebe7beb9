package windlass

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/windlass-dev/windlass/internal/jsontext"
)

// Render turns a tool's return value into the text the model reads. Strings
// pass through unchanged; nil becomes "null"; a json.RawMessage is its own
// text; anything else is JSON without HTML or ASCII escaping; a value that
// cannot be encoded falls back to its Go syntax (%#v). Keeping this in one
// function makes every tool's output look the same to the model.
func Render(value any) string {
	text, _ := encodeValue(value)
	return text
}

// encodeValue returns the rendered text of value and its JSON encoding (nil
// when it has none). It encodes once, for both Content and Data.
func encodeValue(value any) (text string, data json.RawMessage) {
	switch v := value.(type) {
	case nil:
		return "null", json.RawMessage("null")
	case string:
		// Large strings are common (a file, a page, a report): encoded in
		// one allocation rather than encoding/json's three.
		return v, jsontext.Quote(v)
	case json.RawMessage:
		if json.Valid(v) {
			return string(v), v
		}
		return string(v), nil
	}
	b, err := marshalJSON(value)
	if err != nil {
		return fmt.Sprintf("%#v", value), nil
	}
	return string(b), b
}

// marshalJSON is json.Marshal without HTML escaping and without the
// encoder's trailing newline.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
