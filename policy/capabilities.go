package policy

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// disabledBuiltins are removed from the capabilities on top of every builtin
// OPA itself marks nondeterministic, so the same workflow and policy always
// give the same decision: no network (http.send, net.lookup_ip_addr), no
// clock (time.now_ns, and the builtins that verify against the current time),
// no randomness (rand.intn, uuid.rfc4122, signing), no environment
// (opa.runtime), no remote JSON schemas.
var disabledBuiltins = []string{
	"http.send",
	"net.lookup_ip_addr",
	"time.now_ns",
	"opa.runtime",
	"rand.intn",
	"uuid.rfc4122",
	"io.jwt.decode_verify",
	"io.jwt.encode_sign",
	"io.jwt.encode_sign_raw",
	"crypto.x509.parse_and_verify_certificates",
	"crypto.x509.parse_and_verify_certificates_with_options",
	"json.match_schema",
	"json.verify_schema",
}

// capabilities returns OPA's capabilities for this version without the
// nondeterministic builtins. print stays declared so policies that call it
// compile, but Load compiles with print statements off (they are erased);
// Test turns them on so test output shows them.
func capabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	kept := c.Builtins[:0:0]
	for _, b := range c.Builtins {
		if b.Nondeterministic || slices.Contains(disabledBuiltins, b.Name) {
			continue
		}
		kept = append(kept, b)
	}
	c.Builtins = kept
	c.AllowNet = []string{} // no host may be reached, even by builtins added later
	return c
}

// isDisabled reports whether name is a builtin capabilities removed, so an
// "undefined function" error can say why.
func isDisabled(name string) bool {
	if slices.Contains(disabledBuiltins, name) {
		return true
	}
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if b.Name == name {
			return b.Nondeterministic
		}
	}
	return false
}
