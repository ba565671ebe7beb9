package windlass

import (
	"encoding/hex"
	"fmt"
)

// PayloadRef points at a payload stored in the fleet's JetStream object
// store instead of inline in a message: a call's arguments, or a result's
// content and value, when they are larger than a message should carry (see
// PROTOCOL.md, "Payloads by reference"). A reader fetches the object and
// uses it only when it has exactly Size bytes whose SHA-256 is SHA256.
type PayloadRef struct {
	// Bucket is the object store's bucket.
	Bucket string `json:"bucket"`
	// Name is the object's name in the bucket, derived from the call id.
	Name string `json:"name"`
	// Size is the payload's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the payload's SHA-256 digest, in lowercase hex.
	SHA256 string `json:"sha256"`
}

// ArgumentsByReference is what a call's arguments field holds, as JSON,
// when its arguments travel by reference (ToolCall.ArgumentsRef): a string,
// not an object, so that a reader that does not know references refuses
// the call instead of running it without its arguments.
const ArgumentsByReference = `"see arguments_ref"`

// Validate checks that r is a well-formed reference: a bucket and a name,
// a size that is not negative and a 64-digit lowercase hex SHA-256.
func (r PayloadRef) Validate() error {
	switch {
	case r.Bucket == "":
		return fmt.Errorf("bucket: must not be empty")
	case r.Name == "":
		return fmt.Errorf("name: must not be empty")
	case r.Size < 0:
		return fmt.Errorf("size: must not be negative, got %d", r.Size)
	}
	if b, err := hex.DecodeString(r.SHA256); err != nil || len(b) != 32 || hex.EncodeToString(b) != r.SHA256 {
		return fmt.Errorf("sha256: must be 64 lowercase hex digits, got %q", r.SHA256)
	}
	return nil
}
