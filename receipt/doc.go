// Package receipt is the signed record of what a worker ran: an execution
// receipt. For every call of a gated tool (and, when the worker is
// configured so, every call) the worker signs a [Receipt] — the call id,
// the tool, the spec hash, the canonical hash of the arguments that ran,
// the release it ran under (its id and approvers), the hash of the stored
// result, the start and finish times, the worker id and its key id — with
// its own Ed25519 key, and stores it with the result, in the result
// message's Windlass-Receipt header (PROTOCOL.md, "Execution receipts").
//
// # Signing
//
// The signature covers [Receipt.Canonical]: a domain string, then every
// field but the signature, each length-prefixed, in a fixed order. A
// receipt altered in any field — or signed by another key, or with its key
// id changed — fails [Verify]. The header form ([Encode], [Decode]) is the
// receipt's JSON in base64url; its field order does not matter, since the
// signature is over the canonical bytes, and a field this version does not
// know is refused rather than passed unsigned.
//
// # Keys and trust
//
// A worker generates a key pair when it starts, unless it is given one,
// and publishes the public key in the fleet's Redis registry under its key
// id ([KeyID], derived from the key) and the worker's id, where it stays
// for a retention after the worker stopped (default 30 days; see
// registry.Registry.PublishReceiptKey), so receipts verify after the
// worker is gone. A [Checker] fetches the key by id, checks that it is the
// key of that id and was published by the worker the receipt names (a key file given to several workers is published by each), then
// checks the signature and the result's hash.
//
// The trust model, honestly: a receipt proves that whoever held the
// private key of a published key signed it. Whoever can write the
// registry's Redis can publish a key under a made-up worker id and sign
// receipts with it, and can delete keys (then receipts fail as "key not
// published"). What Redis cannot do is replace a key already known: the
// key id is the key's hash. A verifier that must not trust Redis pins the
// worker keys it knows out of band (windlass receipt verify --key).
package receipt
