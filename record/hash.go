package record

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nix-community/go-nix/pkg/nixbase32"
)

// ID identifies a record: the sha256 of its canonical JSON encoding.
type ID [32]byte

// idLen is the length of an ID in Nix base32.
var idLen = nixbase32.EncodedLen(len(ID{}))

// IDOf returns the ID of canonical record bytes.
func IDOf(canonical []byte) ID { return ID(sha256.Sum256(canonical)) }

// String returns the 52 characters of Nix base32, as Nix prints hashes.
func (id ID) String() string { return nixbase32.EncodeToString(id[:]) }

// IsZero reports whether id is the zero ID (no record).
func (id ID) IsZero() bool { return id == ID{} }

// ParseID parses the String form. It checks length and alphabet.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != idLen {
		return id, fmt.Errorf("parse record id %q: want %d characters of Nix base32, got %d", s, idLen, len(s))
	}
	b, err := nixbase32.DecodeString(s)
	if err != nil {
		return id, fmt.Errorf("parse record id %q: %w", s, err)
	}
	if len(b) != len(id) {
		return id, fmt.Errorf("parse record id %q: decodes to %d bytes, want %d", s, len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}

// MarshalText makes an ID its String form in JSON.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the String form.
func (id *ID) UnmarshalText(b []byte) error {
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// Digest is the sha256 of a blob's bytes. It is also the blob's key in the
// store.
type Digest [32]byte

const digestPrefix = "sha256:"

// DigestOf returns the Digest of b.
func DigestOf(b []byte) Digest { return Digest(sha256.Sum256(b)) }

// String returns "sha256:" and 64 lowercase hex digits.
func (d Digest) String() string { return digestPrefix + d.Hex() }

// Hex returns the 64 lowercase hex digits alone.
func (d Digest) Hex() string { return hex.EncodeToString(d[:]) }

// IsZero reports whether d is the zero Digest (no blob).
func (d Digest) IsZero() bool { return d == Digest{} }

// ParseDigest parses the String form. Bare 64 lowercase hex digits (as
// workflow inputs spell sha256) are accepted too.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	rest := strings.TrimPrefix(s, digestPrefix)
	if len(rest) != hex.EncodedLen(len(d)) {
		return d, fmt.Errorf("parse digest %q: want 64 hex digits, got %d", s, len(rest))
	}
	if strings.ToLower(rest) != rest {
		return d, fmt.Errorf("parse digest %q: hex digits must be lowercase", s)
	}
	if _, err := hex.Decode(d[:], []byte(rest)); err != nil {
		return d, fmt.Errorf("parse digest %q: %w", s, err)
	}
	return d, nil
}

// MarshalText makes a Digest its String form in JSON.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses the String form; in JSON only the prefixed form is
// canonical, so Decode rejects bare hex.
func (d *Digest) UnmarshalText(b []byte) error {
	if !strings.HasPrefix(string(b), digestPrefix) {
		return fmt.Errorf("parse digest %q: want prefix %q", b, digestPrefix)
	}
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// NarHash is Nix's NAR hash of a path: the sha256 of its NAR serialisation.
// A NAR stored in the blob store has this hash as its Digest (see Blob).
type NarHash [32]byte

const sriPrefix = "sha256-"

// String returns the SRI form, "sha256-" and standard base64, which is what
// `nix hash path` (Nix >= 2.4) prints.
func (h NarHash) String() string { return sriPrefix + base64.StdEncoding.EncodeToString(h[:]) }

// NixBase32 returns the "sha256:" and Nix base32 form, which older tools
// (nix-store --query --hash) print.
func (h NarHash) NixBase32() string { return "sha256:" + nixbase32.EncodeToString(h[:]) }

// Blob returns the Digest under which the NAR itself is stored.
func (h NarHash) Blob() Digest { return Digest(h) }

// ParseNarHash parses the SRI form ("sha256-<base64>") or the Nix form
// ("sha256:<nixbase32>").
func ParseNarHash(s string) (NarHash, error) {
	var h NarHash
	var b []byte
	var err error
	switch {
	case strings.HasPrefix(s, sriPrefix):
		b, err = base64.StdEncoding.Strict().DecodeString(strings.TrimPrefix(s, sriPrefix))
	case strings.HasPrefix(s, "sha256:"):
		rest := strings.TrimPrefix(s, "sha256:")
		if len(rest) != idLen {
			return h, fmt.Errorf("parse nar hash %q: want %d characters of Nix base32 after \"sha256:\"", s, idLen)
		}
		b, err = nixbase32.DecodeString(rest)
	default:
		return h, fmt.Errorf("parse nar hash %q: want \"sha256-<base64>\" or \"sha256:<nix base32>\"", s)
	}
	if err != nil {
		return h, fmt.Errorf("parse nar hash %q: %w", s, err)
	}
	if len(b) != len(h) {
		return h, fmt.Errorf("parse nar hash %q: decodes to %d bytes, want %d", s, len(b), len(h))
	}
	copy(h[:], b)
	return h, nil
}

// MarshalText makes a NarHash its SRI form in JSON.
func (h NarHash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses the SRI form only, the one canonical spelling.
func (h *NarHash) UnmarshalText(b []byte) error {
	if !strings.HasPrefix(string(b), sriPrefix) {
		return fmt.Errorf("parse nar hash %q: want the SRI form \"sha256-...\"", b)
	}
	p, err := ParseNarHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}
