package sandboxes

import (
	"context"
	"fmt"
	"regexp"
)

// Every sandbox, exec, run, record and snapshot belongs to the identity
// that made it: the caller the server authenticated (an API key or token
// of the identities file, the peer's uid on the unix socket). The server
// puts the caller on each request's context (WithIdentity), and the
// Manager answers another identity as if the thing did not exist: a
// sandbox of someone else is "no sandbox" (404), never "forbidden" (403),
// so that ids cannot be probed. An admin identity sees and acts on
// everything. A context without an identity is the operator's own
// process (a Go caller of this package, the tests): it is an admin whose
// sandboxes belong to nobody, so only admins see them.

// Identity is who calls the Manager.
type Identity struct {
	// Name is DNS-safe (ValidIdentityName): lowercase letters, digits and
	// '-', at most 63. It is what sandboxes, runs, records and snapshots
	// are owned by, and what the policy's action input names.
	Name string
	// Admin sees and acts on every identity's sandboxes, runs, records
	// and snapshots.
	Admin bool
	// MaxSandboxes bounds the sandboxes this identity holds at once
	// (running or being created), MaxRuns the workflows it runs at once;
	// 0 leaves only the server's own limits.
	MaxSandboxes int
	MaxRuns      int
}

// Role is "admin" or "user", as the policy input and the identities file
// spell it.
func (id Identity) Role() string {
	if id.Admin {
		return "admin"
	}
	return "user"
}

// Owns reports whether id may see and act on what owner owns: its own,
// or anything for an admin.
func (id Identity) Owns(owner string) bool {
	return id.Admin || (owner != "" && owner == id.Name)
}

type identityKey struct{}

// WithIdentity returns ctx carrying the caller id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the caller ctx carries, if any.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Operator is the caller of a context without an identity: the
// operator's own process, an admin that owns nothing itself.
var Operator = Identity{Admin: true}

// caller is ctx's identity, Operator when it carries none.
func caller(ctx context.Context) Identity {
	if id, ok := IdentityFrom(ctx); ok {
		return id
	}
	return Operator
}

var identityName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidIdentityName checks that name is a DNS label: 1 to 63 lowercase
// letters, digits and '-', not starting or ending with '-'.
func ValidIdentityName(name string) error {
	if !identityName.MatchString(name) {
		return fmt.Errorf("identity name %q: want a DNS label, 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}
