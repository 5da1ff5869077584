package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Who calls the server. On TCP a caller is the identity whose token it
// sends (Authorization: Bearer TOKEN, or X-API-Key: TOKEN, which E2B's
// SDK sends); on the unix socket it is the peer's uid (SO_PEERCRED):
// uid 0 is the admin "uid-0", any other uid the user "uid-N". What an
// identity owns, only it and admins see (sandboxes.Identity).

// Defaults of an identity's limits (Identity, the identities file).
const (
	DefaultIdentityMaxSandboxes = 8
	DefaultIdentityMaxRuns      = 2
	DefaultIdentityMaxInFlight  = DefaultMaxConcurrentPerClient
)

// TokenIdentity is the name of the one identity of Options.Token (serve
// --token-file).
const TokenIdentity = "token"

// unixPrefix starts the names of the unix socket's identities, which the
// identities file may not use.
const unixPrefix = "uid-"

// Identity is a caller of the server: the Manager's identity (its name,
// role and the limits the Manager holds it to) with the server's own
// limit and, for TCP, the SHA-256 of its token.
type Identity struct {
	sandboxes.Identity
	// MaxInFlight bounds the requests this identity has in flight; more
	// are answered 429 (0: Options.MaxConcurrentPerClient).
	MaxInFlight int
	// TokenSHA256 is the SHA-256 of the token TCP clients of this
	// identity send. The server keeps only the hash, and compares hashes
	// in constant time.
	TokenSHA256 [32]byte
}

// MaxIdentitiesBytes bounds an identities file.
const MaxIdentitiesBytes = 1 << 20

// identitiesFile is the identities file's YAML (or JSON, which is YAML).
type identitiesFile struct {
	Identities []identityEntry `yaml:"identities"`
}

type identityEntry struct {
	Name        string          `yaml:"name"`
	TokenSHA256 string          `yaml:"token_sha256"`
	Role        string          `yaml:"role"`
	Limits      *identityLimits `yaml:"limits"`
}

type identityLimits struct {
	MaxSandboxes *limit `yaml:"max_sandboxes"`
	MaxRuns      *limit `yaml:"max_runs"`
	MaxInFlight  *limit `yaml:"max_in_flight"`
}

// limit is a whole number as YAML writes one: 1.5 or "2" is refused,
// not rounded or read as a number.
type limit int

func (l *limit) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return fmt.Errorf("line %d: %q is not a whole number", n.Line, n.Value)
	}
	var v int
	if err := n.Decode(&v); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*l = limit(v)
	return nil
}

// LoadIdentities reads an identities file (ReadSecretFile: a regular
// file of the server's user that no one else may read or write) and
// parses it (ParseIdentities).
func LoadIdentities(path string) ([]Identity, error) {
	b, err := ReadSecretFile(path, MaxIdentitiesBytes)
	if err != nil {
		return nil, err
	}
	ids, err := ParseIdentities(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ids, nil
}

// ParseIdentities parses an identities file, strictly: a mapping with
// the one key "identities", a list of entries each with a name (a DNS
// label that does not start with "uid-"), token_sha256 (64 hex digits,
// the SHA-256 of the token), role (user, the default, or admin) and
// limits (max_sandboxes, max_runs, max_in_flight, each at least 1; the
// Default* values when left out). An unknown key, a duplicate name or
// token, or anything else is an error naming its line.
func ParseIdentities(b []byte) ([]Identity, error) {
	var f identitiesFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the identities file is empty: list identities, such as identities: [{name: ci, token_sha256: <hex>, role: user}]")
		}
		return nil, fmt.Errorf("parse the identities file: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse the identities file: more than one YAML document; put every identity in one list")
	}
	// The entries' lines, for the messages below.
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse the identities file: %w", err)
	}
	lines := entryLines(&doc)
	if len(f.Identities) == 0 {
		return nil, errors.New("the identities file lists no identities: a TCP client could not authenticate; list at least one under identities:")
	}
	var out []Identity
	names := map[string]int{}
	tokens := map[[32]byte]int{}
	for i, e := range f.Identities {
		at := fmt.Sprintf("identities[%d]", i)
		if i < len(lines) {
			at = fmt.Sprintf("line %d: %s", lines[i], at)
		}
		id, err := e.identity()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		if j, dup := names[id.Name]; dup {
			return nil, fmt.Errorf("%s: name %q is also identities[%d]'s: give each identity its own name", at, id.Name, j)
		}
		if j, dup := tokens[id.TokenSHA256]; dup {
			return nil, fmt.Errorf("%s (%s): token_sha256 is also identities[%d]'s (%s): a token names one identity; make a new token for each", at, id.Name, j, out[j].Name)
		}
		names[id.Name], tokens[id.TokenSHA256] = i, i
		out = append(out, id)
	}
	return out, nil
}

// entryLines are the lines of the identities list's entries.
func entryLines(doc *yaml.Node) []int {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "identities" && m.Content[i+1].Kind == yaml.SequenceNode {
			var lines []int
			for _, n := range m.Content[i+1].Content {
				lines = append(lines, n.Line)
			}
			return lines
		}
	}
	return nil
}

func (e identityEntry) identity() (Identity, error) {
	if e.Name == "" {
		return Identity{}, errors.New("no name: give each identity a name, such as name: ci")
	}
	if err := sandboxes.ValidIdentityName(e.Name); err != nil {
		return Identity{}, err
	}
	if strings.HasPrefix(e.Name, unixPrefix) {
		return Identity{}, fmt.Errorf("identity name %q: names starting with %q are the unix socket's (uid-N is the peer with uid N); choose another", e.Name, unixPrefix)
	}
	id := Identity{Identity: sandboxes.Identity{Name: e.Name, MaxSandboxes: DefaultIdentityMaxSandboxes, MaxRuns: DefaultIdentityMaxRuns},
		MaxInFlight: DefaultIdentityMaxInFlight}
	switch e.Role {
	case "", "user":
	case "admin":
		id.Admin = true
	default:
		return Identity{}, fmt.Errorf("identity %s: role %q: want user or admin", e.Name, e.Role)
	}
	h := e.TokenSHA256
	if h == "" {
		return Identity{}, fmt.Errorf("identity %s: no token_sha256: give the SHA-256 of its token in hex (printf %%s \"$TOKEN\" | sha256sum)", e.Name)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || len(raw) != sha256.Size {
		return Identity{}, fmt.Errorf("identity %s: token_sha256 %q: want the 64 hex digits of the token's SHA-256 (printf %%s \"$TOKEN\" | sha256sum), not the token itself", e.Name, shorten(h))
	}
	copy(id.TokenSHA256[:], raw)
	if id.TokenSHA256 == sha256.Sum256(nil) {
		return Identity{}, fmt.Errorf("identity %s: token_sha256 is the SHA-256 of the empty string: hash the token itself", e.Name)
	}
	if l := e.Limits; l != nil {
		for _, f := range []struct {
			name string
			v    *limit
			dst  *int
		}{{"max_sandboxes", l.MaxSandboxes, &id.MaxSandboxes}, {"max_runs", l.MaxRuns, &id.MaxRuns}, {"max_in_flight", l.MaxInFlight, &id.MaxInFlight}} {
			if f.v == nil {
				continue
			}
			if *f.v < 1 {
				return Identity{}, fmt.Errorf("identity %s: limits.%s %d: want 1 or more (leave it out for the default)", e.Name, f.name, *f.v)
			}
			*f.dst = int(*f.v)
		}
	}
	return id, nil
}

// shorten keeps what a message shows of a value that may be a secret
// short: its first characters.
func shorten(s string) string {
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return s
}

// ReadSecretFile reads a file that holds secrets or says who may do what
// (serve's --token-file, --identities): at most max bytes of a regular
// file (symlinks are followed, as to a mounted secret) owned by the
// server's user, which group and others can neither read nor write. A
// FIFO is refused without blocking.
func ReadSecretFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %s, not a regular file", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s is owned by uid %d, not by the server's user (uid %d): whoever owns it decides who may call the server; chown it", path, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: group or others may read or write it; chmod 600 %s", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", path, max)
	}
	return b, nil
}
