package receipt

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is the receipt format this package writes and reads.
const Version = 1

// domain starts the signed bytes, so that a receipt's signature can never
// be taken for a signature over anything else.
const domain = "windlass-receipt/v1"

// Receipt is what a worker attests about one call it answered. Every field
// but Signature is covered by the signature (see [Receipt.Canonical]).
type Receipt struct {
	// Version is the format's version: 1.
	Version int `json:"v"`
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// SpecHash is the hash of the spec the worker served the tool with
	// (windlass.Spec.Hash).
	SpecHash string `json:"spec_hash"`
	// ArgsHash is the canonical SHA-256 of the arguments the tool ran with
	// (approval/release.ArgumentsHash, the hash a release binds); empty
	// when the worker answered without reading arguments sent by
	// reference.
	ArgsHash string `json:"args_hash"`
	// ReleaseID identifies the approval service's release the call ran
	// under: the hex SHA-256 of its Windlass-Release header value. Empty
	// for a call that ran without a release (an ungated tool).
	ReleaseID string `json:"release_id,omitempty"`
	// ApprovedBy are the reviewers the release names, in its order.
	ApprovedBy []string `json:"approved_by,omitempty"`
	// ResultHash is [ResultHash] of the result message's body as stored on
	// the results stream.
	ResultHash string `json:"result_hash"`
	// StartedAt is when the tool started; zero when it did not run (the
	// call was answered without running: canceled, expired, refused
	// arguments).
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the tool returned; zero when it did not run.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Worker is the id of the worker that ran the call.
	Worker string `json:"worker"`
	// KeyID names the worker's public key: [KeyID] of it.
	KeyID string `json:"key_id"`
	// Signature is the Ed25519 signature of [Receipt.Canonical] by the key
	// KeyID names.
	Signature []byte `json:"sig"`
}

// ResultHash is the hex SHA-256 of a result message's body: the exact
// bytes stored on the results stream (the result's JSON, or its
// by-reference stub, whose references carry their objects' SHA-256).
func ResultHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Canonical returns the bytes the signature covers: the domain string
// "windlass-receipt/v1", then each field in a fixed order, each as a
// 4-byte big-endian length and its UTF-8 bytes — version (decimal),
// call_id, tool, spec_hash, args_hash, release_id, the number of approvers
// (decimal) and each approver, result_hash, started_at, finished_at (RFC
// 3339 in UTC with nanoseconds, empty when zero), worker, key_id. No field
// can run into its neighbour, so no two receipts that differ in any field
// share their canonical bytes.
func (r Receipt) Canonical() []byte {
	fields := make([]string, 0, 13+len(r.ApprovedBy))
	fields = append(fields, strconv.Itoa(r.Version), r.CallID, r.Tool, r.SpecHash, r.ArgsHash, r.ReleaseID, strconv.Itoa(len(r.ApprovedBy)))
	fields = append(fields, r.ApprovedBy...)
	fields = append(fields, r.ResultHash, stamp(r.StartedAt), stamp(r.FinishedAt), r.Worker, r.KeyID)
	n := len(domain)
	for _, f := range fields {
		n += 4 + len(f)
	}
	out := make([]byte, 0, n)
	out = append(out, domain...)
	for _, f := range fields {
		out = binary.BigEndian.AppendUint32(out, uint32(len(f)))
		out = append(out, f...)
	}
	return out
}

// stamp is a time in the canonical form: RFC 3339 in UTC with nanoseconds,
// empty when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// headerPrefix starts the header form of a receipt.
const headerPrefix = "v1."

// Encode returns r in its header form: "v1." and the unpadded base64url of
// its JSON (which contains the signature). The form is ASCII without
// spaces, safe as a NATS header value.
func Encode(r Receipt) (string, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("receipt: encode: %w", err)
	}
	return headerPrefix + base64.RawURLEncoding.EncodeToString(data), nil
}

// Decode reads a receipt in the header form [Encode] writes. A receipt of
// another version, with fields this version does not know (they would not
// be signed), or without a signature is refused with a [*CheckError]
// whose Check is CheckMalformed.
func Decode(s string) (Receipt, error) {
	var r Receipt
	rest, ok := strings.CutPrefix(s, headerPrefix)
	if !ok {
		return r, checkFailed(CheckMalformed, "the receipt must start with %q", headerPrefix)
	}
	data, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return r, checkFailed(CheckMalformed, "the receipt is not unpadded base64url: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, checkFailed(CheckMalformed, "the receipt's JSON: %v", err)
	}
	if dec.More() {
		return r, checkFailed(CheckMalformed, "the receipt holds more than one JSON value")
	}
	switch {
	case r.Version != Version:
		return r, checkFailed(CheckMalformed, "version %d, want %d", r.Version, Version)
	case len(r.Signature) == 0:
		return r, checkFailed(CheckMalformed, "the receipt has no signature")
	case r.KeyID == "":
		return r, checkFailed(CheckMalformed, "the receipt names no key (key_id)")
	}
	return r, nil
}

// ErrInvalid is wrapped by every failed check of a receipt.
var ErrInvalid = errors.New("receipt: invalid receipt")

// Check names one check of a receipt's verification; a [*CheckError]
// says which one failed.
type Check string

// The checks of [Verify] and [Checker.Check], in the order they run.
const (
	// CheckMissing: the stored result carries no receipt.
	CheckMissing Check = "missing"
	// CheckMalformed: the receipt cannot be read (see [Decode]).
	CheckMalformed Check = "malformed"
	// CheckCall: the receipt is another call's.
	CheckCall Check = "call_id"
	// CheckKey: the key the receipt names is not published, or what is
	// published under its id is not the key of that id, or it was
	// published by another worker than the receipt names.
	CheckKey Check = "key"
	// CheckSignature: the signature does not verify: the receipt was
	// altered, or not signed by that key.
	CheckSignature Check = "signature"
	// CheckResult: the stored result is not the one the receipt signs.
	CheckResult Check = "result_hash"
	// CheckRelease: a verified receipt of a run its reviewers did not
	// approve: no release, or other arguments, tool or approvers than the
	// held call's (checked by the approval service, which knows the call).
	CheckRelease Check = "release"
)

// CheckError is a failed check of a receipt. It wraps [ErrInvalid], and
// the error of the key lookup when Check is CheckKey.
type CheckError struct {
	// Check is the check that failed.
	Check Check
	// Detail says what was wrong.
	Detail string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *CheckError) Error() string {
	return fmt.Sprintf("receipt: check %s failed: %s", e.Check, e.Detail)
}

// Unwrap returns [ErrInvalid] and the underlying error, if any.
func (e *CheckError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

func checkFailed(c Check, format string, args ...any) *CheckError {
	return &CheckError{Check: c, Detail: fmt.Sprintf(format, args...)}
}

// CheckOf is the check a verification error failed, or "" when err is not
// a [*CheckError].
func CheckOf(err error) Check {
	var ce *CheckError
	if errors.As(err, &ce) {
		return ce.Check
	}
	return ""
}
