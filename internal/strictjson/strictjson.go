// Package strictjson decodes the JSON bodies that clients send to the
// fleet's HTTP APIs (the dispatcher's, package dispatcher/httpapi; the
// approval service's reviewer decisions, package approval), so that what a
// proxy or an auditor reads in a body is what the server acts on: field
// names match exactly (case-sensitive), a name given twice is refused,
// invalid UTF-8 is refused (in names, values and raw JSON such as a call's
// arguments alike), and so are unknown fields and anything after the one
// JSON value. encoding/json accepts all of these but the last two, letting
// one case variant or the last duplicate win and replacing invalid UTF-8
// with U+FFFD.
//
// It is github.com/go-json-experiment/json with encoding/json's semantics
// otherwise (how null, numbers, json.RawMessage and UnmarshalJSON methods
// decode), so a body it accepts decodes to the value encoding/json
// decodes.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/windlass-dev/windlass/internal/argcheck"
)

// options are encoding/json's, with the strict checks on and errors
// reported with their place (the JSON pointer of the field).
var options = json.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsonv1.ReportErrorsWithLegacySemantics(false),
	json.MatchCaseInsensitiveNames(false),
	json.RejectUnknownMembers(true),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// Error is a body Decode refuses.
type Error struct {
	// Msg is short, for the client: it names the field (by its path from
	// the body's top, names joined by "/": "metadata/requester") and the
	// rule, as in `duplicate field "tool"`.
	Msg string
	// Err is the decoder's own error.
	Err error
}

// Error returns the message for the client.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns the decoder's error.
func (e *Error) Unwrap() error { return e.Err }

// Decode decodes exactly one JSON value from r into v, which must be a
// non-nil pointer. A body the package refuses is an [*Error]; an error of
// r itself (a body over its size limit, *http.MaxBytesError;
// past its deadline, one wrapping os.ErrDeadlineExceeded) is returned as
// r returned it. maxValues, when positive, bounds the JSON values of the
// body: one of more is a [*TooManyValuesError], found before decoding
// (checking names for duplicates keeps each object's names, some 200 bytes
// a name: 236 MiB for an 11 MiB body of a million names).
func Decode(r io.Reader, v any, maxValues int) error {
	if maxValues > 0 {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if _, over := argcheck.Values(data, maxValues); over {
			return &TooManyValuesError{Limit: maxValues}
		}
		r = bytes.NewReader(data)
	}
	body := &reader{r: r}
	dec := jsontext.NewDecoder(body, options)
	if err := json.UnmarshalDecode(dec, v); err != nil {
		if body.err != nil {
			return body.err
		}
		return &Error{Msg: message(err), Err: err}
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		if body.err != nil {
			return body.err
		}
		return &Error{Msg: "trailing data after the JSON value", Err: err}
	}
	return nil
}

// TooManyValuesError is a body of more JSON values than the bound Decode
// was given: it was not decoded.
type TooManyValuesError struct {
	// Limit is the bound.
	Limit int
}

// Error says so.
func (e *TooManyValuesError) Error() string {
	return fmt.Sprintf("the body holds more than %d JSON values", e.Limit)
}

// reader keeps the first error of the body's reader, to return it as the
// reader gave it rather than as the decoder wraps it.
type reader struct {
	r   io.Reader
	err error
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// message says what is wrong with a body the decoder refused.
func message(err error) string {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.Is(err, io.EOF):
		return "empty; want a JSON object"
	case errors.As(err, &syn):
		return syntaxMessage(syn)
	case errors.As(err, &sem):
		return semanticMessage(sem)
	default:
		return err.Error()
	}
}

// errInvalidUTF8 is the decoder's error for invalid UTF-8, which its
// package does not export: the one it reports for a string holding some
// (nil, should it report another kind of error: invalid UTF-8 would then be
// reported as other invalid JSON is, which the tests catch).
var errInvalidUTF8 = func() error {
	_, err := jsontext.NewDecoder(strings.NewReader("\"\xff\"")).ReadToken()
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return syn.Err
	}
	return nil
}()

// isInvalidUTF8 reports whether err is the decoder's error for invalid
// UTF-8.
func isInvalidUTF8(err error) bool { return errInvalidUTF8 != nil && err == errInvalidUTF8 }

// syntaxMessage is the message for a body that is not strict JSON text.
func syntaxMessage(syn *jsontext.SyntacticError) string {
	switch {
	case syn.Err == jsontext.ErrDuplicateName:
		return fmt.Sprintf("duplicate field %q", path(syn.JSONPointer))
	case isInvalidUTF8(syn.Err) && syn.JSONPointer == "":
		return "invalid UTF-8 in a field name" // of the body's top object
	case isInvalidUTF8(syn.Err):
		// The pointer is the field whose value holds it, or the object
		// whose member name does.
		return fmt.Sprintf("invalid UTF-8 in field %q", path(syn.JSONPointer))
	case errors.Is(syn.Err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	case syn.JSONPointer != "":
		return fmt.Sprintf("invalid JSON in field %q: %v", path(syn.JSONPointer), syn.Err)
	default:
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	}
}

// semanticMessage is the message for JSON that does not fit the value
// decoded into: an unknown field, or a value of the wrong type.
func semanticMessage(sem *json.SemanticError) string {
	if sem.Err == json.ErrUnknownName {
		return unknownFieldMessage(sem)
	}
	where := ""
	if sem.JSONPointer != "" {
		where = fmt.Sprintf("field %q: ", path(sem.JSONPointer))
	}
	if sem.Err != nil && !errors.Is(sem.Err, strconv.ErrSyntax) && !errors.Is(sem.Err, strconv.ErrRange) {
		return where + sem.Err.Error() // an UnmarshalJSON method's own error
	}
	msg := where + "want " + want(sem.GoType)
	if got := got(sem); got != "" {
		msg += ", got " + got
	}
	return msg
}

// got says what JSON the body had where it did not fit.
func got(sem *json.SemanticError) string {
	switch sem.JSONKind {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		if len(sem.JSONValue) > 0 && len(sem.JSONValue) <= 40 {
			return "the number " + string(sem.JSONValue)
		}
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	default:
		return ""
	}
}

// unknownFieldMessage names an unknown field, and the field it is a case
// variant of, if any.
func unknownFieldMessage(sem *json.SemanticError) string {
	msg := fmt.Sprintf("unknown field %q", path(sem.JSONPointer))
	if known, ok := caseVariantOf(sem.GoType, sem.JSONPointer.LastToken()); ok {
		msg += fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", known)
	}
	return msg
}

// want says what JSON a Go type takes.
func want(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("a %d-bit integer", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a non-negative %d-bit integer", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return t.String()
	}
}

// caseVariantOf finds the field of struct type t whose JSON name is name
// in another case.
func caseVariantOf(t reflect.Type, name string) (string, bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "", false
	}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		known, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if known == "" {
			known = f.Name
		}
		if known != "-" && strings.EqualFold(known, name) {
			return known, true
		}
	}
	return "", false
}

// path is a JSON pointer as the names (and indexes) from the body's top,
// joined by "/": "tool", "metadata/requester".
func path(p jsontext.Pointer) string {
	var names []string
	for name := range p.Tokens() {
		names = append(names, name)
	}
	return strings.Join(names, "/")
}
