package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Hash is the sha256 of a workflow's canonical JSON: its identity.
type Hash [32]byte

// hashPrefix is how a Hash is spelled, so it is never mistaken for a
// record id (Nix base32) or a file digest.
const hashPrefix = "sha256:"

// HashOf returns the Hash of canonical bytes.
func HashOf(canonical []byte) Hash { return Hash(sha256.Sum256(canonical)) }

// String returns "sha256:" and 64 lowercase hex digits.
func (h Hash) String() string { return hashPrefix + hex.EncodeToString(h[:]) }

// ParseHash parses the String form back.
func ParseHash(s string) (Hash, error) {
	var h Hash
	rest, ok := strings.CutPrefix(s, hashPrefix)
	if !ok {
		return h, fmt.Errorf("parse workflow hash %q: want prefix %q", s, hashPrefix)
	}
	if len(rest) != hex.EncodedLen(len(h)) {
		return h, fmt.Errorf("parse workflow hash %q: want 64 hex digits, got %d", s, len(rest))
	}
	if _, err := hex.Decode(h[:], []byte(rest)); err != nil {
		return h, fmt.Errorf("parse workflow hash %q: %w", s, err)
	}
	return h, nil
}

// MarshalText makes a Hash its String form in JSON.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses the String form.
func (h *Hash) UnmarshalText(b []byte) error {
	p, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}
