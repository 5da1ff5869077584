package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Signed file URLs, files.uploadUrl() and downloadUrl(): instead of the
// X-Access-Token header, /files takes ?signature= (and
// ?signature_expiration=, unix seconds), which the SDK computes from the
// sandbox's access token as
//
//	"v1_" + base64(sha256("PATH:OPERATION:USERNAME:TOKEN[:EXPIRATION]"))
//
// with the padding cut, OPERATION "read" for GET and "write" for POST,
// PATH and USERNAME the query's as sent ("" when absent). A signature is
// good for exactly that path, operation, user and sandbox, until it
// expires; one without an expiration lasts as long as the token.

// fileSignature is the signature of a /files URL as the SDK computes it.
func fileSignature(path, operation, username, token, expiration string) string {
	raw := path + ":" + operation + ":" + username + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// checkFileSignature judges a /files request's signature against the
// sandbox's token at now.
func checkFileSignature(r *http.Request, token string, now time.Time) error {
	q := r.URL.Query()
	var op string
	switch r.Method {
	case http.MethodGet:
		op = "read"
	case http.MethodPost:
		op = "write"
	default:
		return sandboxes.Errorf(sandboxes.CodeAuth, "%s /files: a signed URL is for GET (downloadUrl) or POST (uploadUrl)", r.Method)
	}
	sig, exp := q.Get("signature"), q.Get("signature_expiration")
	if !strings.HasPrefix(sig, "v1_") {
		return sandboxes.Errorf(sandboxes.CodeAuth, "signature %q: this server takes v1_ signatures (the SDK's uploadUrl and downloadUrl make them)", quoteShort(sig))
	}
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || n < 0 {
			return sandboxes.Errorf(sandboxes.CodeAuth, "signature_expiration %q: want unix seconds", quoteShort(exp))
		}
		if now.Unix() > n {
			return sandboxes.Errorf(sandboxes.CodeAuth, "the signed URL expired at %s: ask for a new one", time.Unix(n, 0).UTC().Format(time.RFC3339))
		}
	}
	want := fileSignature(q.Get("path"), op, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return sandboxes.Errorf(sandboxes.CodeAuth, "the signature does not match this sandbox, path, user and %s: sign the URL with this sandbox's access token (uploadUrl for POST, downloadUrl for GET)", op)
	}
	return nil
}

// quoteShort is s cut to 40 bytes for a message.
func quoteShort(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
