package payload

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/jsontext"
	"github.com/windlass-dev/windlass/internal/layout"
)

// Inline reports whether a result may travel inline under the inline
// limit: when its content and value alone are over it, its message is
// surely over it too, and it need not be encoded to know. (When they are
// not, its encoding decides: a worker checks the encoded size.)
func Inline(r windlass.ToolResult, inline int64) bool {
	return int64(len(r.Content)+len(r.Data)) <= inline
}

// ValueSize is the size a result's limit by reference applies to: its
// value, or its content when it has none.
func ValueSize(r windlass.ToolResult) int64 {
	return int64(max(len(r.Data), len(r.Content)))
}

// Offload stores a result's content and value in the bucket and returns
// the result that points at them (see windlass.ToolResult.ContentRef).
// The value's object serves the content too when the content is its text
// (any value but a string, or a json.RawMessage, renders so: content_ref
// names the same object) or the string it holds (a string value: no
// content_ref); otherwise the content is an object of its own.
func (s *Store) Offload(ctx context.Context, r windlass.ToolResult) (windlass.ToolResult, error) {
	if len(r.Data) > 0 {
		ref, err := s.Put(ctx, layout.PayloadData, r.CallID, r.Data)
		if err != nil {
			return r, err
		}
		r.DataRef = &ref
	}
	switch {
	case r.DataRef != nil && string(r.Data) == r.Content:
		r.ContentRef = r.DataRef
	case r.DataRef != nil && r.Data[0] == '"' && jsontext.Quotes(r.Content, r.Data):
		// The string the value holds: the reader unquotes the value.
	default:
		ref, err := s.PutString(ctx, layout.PayloadContent, r.CallID, r.Content)
		if err != nil {
			return r, err
		}
		r.ContentRef = &ref
	}
	r.Content, r.Data = "", nil
	return r, nil
}

// Forget deletes the objects of a result that was not stored (a second
// answer to a call), best effort.
func (s *Store) Forget(ctx context.Context, r windlass.ToolResult) {
	if r.DataRef != nil {
		s.Delete(ctx, *r.DataRef)
	}
	if r.ContentRef != nil && (r.DataRef == nil || *r.ContentRef != *r.DataRef) {
		s.Delete(ctx, *r.ContentRef)
	}
}

// Resolve returns r with its content and value fetched when they travel
// by reference (r itself otherwise), each at most limit bytes. An object
// that cannot be used makes the result a payload_unreadable error (over
// limit, result_too_large) that says why, with a nil error: the tool ran,
// and its result is not to be had. err is the connection's or the
// server's: asking again later may succeed.
func (s *Store) Resolve(ctx context.Context, r windlass.ToolResult, limit int64) (windlass.ToolResult, error) {
	if r.ContentRef == nil && r.DataRef == nil {
		return r, nil
	}
	if s == nil {
		return r, errors.New("payload: the result travels by reference and no payloads bucket is open")
	}
	out := r
	out.ContentRef, out.DataRef = nil, nil
	if ref := r.DataRef; ref != nil {
		data, err := s.Get(ctx, *ref, limit)
		if err != nil {
			return unusable(r, "value", err)
		}
		out.Data = data
	}
	switch ref := r.ContentRef; {
	case ref == nil:
		// The string the value holds (see Offload).
		content, err := jsontext.Unquote(out.Data)
		if err != nil {
			return unusable(r, "content", fmt.Errorf("%w: its value is not the JSON string its content is taken from: %w", ErrUnreadable, err))
		}
		out.Content = content
	case r.DataRef != nil && *ref == *r.DataRef:
		out.Content = string(out.Data) // the value's text
	default:
		content, err := s.Get(ctx, *ref, limit)
		if err != nil {
			return unusable(r, "content", err)
		}
		// Get's buffer is this function's alone and never written again:
		// the string takes it over instead of a copy of it (measured: a
		// 50 MiB result held in four copies' room, three with this).
		out.Content = unsafe.String(unsafe.SliceData(content), len(content))
	}
	return out, nil
}

// unusable is the result of a result whose object of a part cannot be
// fetched: an error result when it cannot be used, or err when it may be
// fetched later.
func unusable(r windlass.ToolResult, part string, err error) (windlass.ToolResult, error) {
	var tooLarge *TooLargeError
	var code windlass.ErrorCode
	switch {
	case errors.As(err, &tooLarge):
		code = windlass.CodeResultTooLarge
	case errors.Is(err, ErrUnreadable):
		code = windlass.CodePayloadUnreadable
	default:
		return r, err
	}
	e := windlass.ErrorResult(windlass.ToolCall{ID: r.CallID, Name: r.Name}, code,
		fmt.Sprintf("Tool %q ran, but its result's %s, stored by reference, cannot be used: %v.", r.Name, part, err))
	e.DurationMS, e.Worker, e.Attempt, e.StartedAt = r.DurationMS, r.Worker, r.Attempt, r.StartedAt
	return e, nil
}
