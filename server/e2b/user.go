package e2b

import (
	"encoding/base64"
	"net/http"
	"strings"
)

// The user a request of envd runs as: the SDK names one with
// Authorization: Basic base64("name:") on the RPC calls and ?username= on
// /files (docs/e2b.md). Every command of this server's sandboxes runs as
// uid 65534 in a user namespace, and its files belong to it: that is
// E2B's "user" (home /home/user), the default. "root" is refused: the
// sandbox's user namespace maps no root that could be given safely (the
// jail drops every capability, and the VM's agent runs commands as the
// same uid), so a command asking for root would otherwise run as someone
// else than it asked for. Any other name is a user this sandbox does not
// have, as envd answers for a name missing from /etc/passwd.

// defaultUser is E2B's default user, the only one this server's
// sandboxes have.
const defaultUser = "user"

// checkUser refuses a request of envd that names a user other than
// defaultUser.
func checkUser(r *http.Request) error {
	name, ok := "", false
	if r.URL.Path == "/files" {
		if q := r.URL.Query(); q.Has("username") {
			name, ok = q.Get("username"), true
		}
	} else if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Basic") {
			return rpcErrorf(codeUnauthenticated, "Authorization: envd takes Basic base64(\"user:\") naming the user, not %q", scheme)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		if err != nil {
			return rpcErrorf(codeUnauthenticated, "Authorization: Basic: the credentials are not base64: %v", err)
		}
		name, _, _ = strings.Cut(string(raw), ":")
		ok = true
	}
	switch {
	case !ok || name == "" || name == defaultUser:
		return nil
	case name == "root":
		return rpcErrorf(codePermissionDenied, "user \"root\": this server's sandboxes have no root; commands run as %q (uid 65534 in the sandbox's user namespace), the default: leave user unset or give %q (docs/e2b.md)", defaultUser, defaultUser)
	}
	return rpcErrorf(codeUnauthenticated, "user %q: this sandbox has the one user %q (docs/e2b.md)", name, defaultUser)
}
