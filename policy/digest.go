package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Digest is a sha256 that pins part of a decision: the policy bundle, the
// input document, or the decision itself.
type Digest [32]byte

// digestPrefix is how a Digest is spelled, like workflow.Hash.
const digestPrefix = "sha256:"

// String returns "sha256:" and 64 lowercase hex digits.
func (d Digest) String() string { return digestPrefix + hex.EncodeToString(d[:]) }

// IsZero reports whether d is unset.
func (d Digest) IsZero() bool { return d == Digest{} }

// ParseDigest parses the String form back.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	rest, ok := strings.CutPrefix(s, digestPrefix)
	if !ok {
		return d, fmt.Errorf("parse policy digest %q: want prefix %q", s, digestPrefix)
	}
	if len(rest) != hex.EncodedLen(len(d)) {
		return d, fmt.Errorf("parse policy digest %q: want 64 hex digits, got %d", s, len(rest))
	}
	if _, err := hex.Decode(d[:], []byte(rest)); err != nil {
		return d, fmt.Errorf("parse policy digest %q: %w", s, err)
	}
	return d, nil
}

// MarshalText makes a Digest its String form in JSON.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses the String form.
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// decisionID is sha256("agentsandbox policy decision\n" || bundle || input)
// over the raw 32-byte digests: one id per (policy bundle, input) pair.
// Evaluation is deterministic, so the id names the decision too.
func decisionID(bundle, input Digest) Digest {
	h := sha256.New()
	h.Write([]byte("agentsandbox policy decision\n"))
	h.Write(bundle[:])
	h.Write(input[:])
	var d Digest
	h.Sum(d[:0])
	return d
}
