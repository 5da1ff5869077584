package nixbuild

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Sharing is how one machine's realisations reach others through Nix's
// own mechanisms (docs/nix-cache.md): binary caches tried before building
// (substituters, whose paths must be signed by one of TrustedPublicKeys),
// remote builders, and a binary cache that every closure realised here is
// copied to, signed with SigningKeyFile. The zero Sharing changes nothing:
// Nix's own configuration (nix.conf) applies.
type Sharing struct {
	// Substituters are binary cache URLs (https://, http://, file://,
	// s3:// where this Nix has it) tried before building, after the ones
	// nix.conf names (extra-substituters). Nix uses them only for root or
	// a trusted user (nix.conf's trusted-users).
	Substituters []string
	// TrustedPublicKeys are the keys ("NAME:BASE64", as `nix key
	// convert-secret-to-public` prints them) whose signatures a
	// substituted path may carry (extra-trusted-public-keys); an unsigned
	// or otherwise signed path is refused by Nix.
	TrustedPublicKeys []string
	// Builders is Nix's --builders, such as "ssh://builder x86_64-linux";
	// "" leaves nix.conf's.
	Builders string
	// MaxJobs is Nix's --max-jobs: "0" builds nothing here (every path
	// comes from a substituter or a remote builder), "auto" one job per
	// core; "" leaves nix.conf's.
	MaxJobs string
	// Push is a binary cache (a Nix store URL such as file:///srv/cache)
	// that every closure realised here is copied to after the build,
	// signed with SigningKeyFile first.
	Push string
	// SigningKeyFile is the secret key (`nix key generate-secret`) that
	// signs what is pushed.
	SigningKeyFile string
}

// Check refuses a Sharing Nix would misread or that cannot do what it
// says, with what to give instead.
func (s Sharing) Check() error {
	for _, u := range s.Substituters {
		if err := checkStoreURL("substituter", u, "https", "http", "file", "s3"); err != nil {
			return err
		}
	}
	for _, k := range s.TrustedPublicKeys {
		if err := checkPublicKey(k); err != nil {
			return err
		}
	}
	if strings.ContainsAny(s.Builders, "\n") {
		return errors.New("builders: one line of Nix's --builders syntax, such as 'ssh://builder x86_64-linux' (machines separated by ';')")
	}
	if s.MaxJobs != "" && s.MaxJobs != "auto" && strings.Trim(s.MaxJobs, "0123456789") != "" {
		return fmt.Errorf("max-jobs %q: a number of jobs (0: build nothing here) or auto", s.MaxJobs)
	}
	switch {
	case s.Push == "" && s.SigningKeyFile != "":
		return errors.New("a signing key without a cache to push to: give the binary cache URL too")
	case s.Push != "" && s.SigningKeyFile == "":
		return fmt.Errorf("push to %s: give the secret key that signs what is pushed (make one with 'nix key generate-secret --key-name NAME'); other machines trust its public key", s.Push)
	case s.Push != "":
		if err := checkStoreURL("push cache", s.Push, "file", "s3", "ssh", "ssh-ng", "https", "http"); err != nil {
			return err
		}
		if _, err := os.Stat(s.SigningKeyFile); err != nil {
			return fmt.Errorf("signing key: %w", err)
		}
	}
	return nil
}

// Substitutes says whether builds may come from elsewhere, which an
// offline build forbids.
func (s Sharing) Substitutes() bool { return len(s.Substituters) > 0 || s.Builders != "" }

func checkStoreURL(what, raw string, schemes ...string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, raw, err)
	}
	for _, s := range schemes {
		if u.Scheme == s {
			if strings.ContainsAny(raw, " \t\n") {
				return fmt.Errorf("%s %q: a URL has no spaces", what, raw)
			}
			return nil
		}
	}
	return fmt.Errorf("%s %q: want a URL of scheme %s", what, raw, strings.Join(schemes, ", "))
}

// checkPublicKey checks a Nix public key "NAME:BASE64" of an ed25519 key.
func checkPublicKey(k string) error {
	name, b64, ok := strings.Cut(k, ":")
	if !ok || name == "" || strings.ContainsAny(name, " \t\n") {
		return fmt.Errorf("trusted public key %q: want NAME:BASE64, as 'nix key convert-secret-to-public' prints it", k)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return fmt.Errorf("trusted public key %q: the part after %q is not the base64 of a %d-byte ed25519 key", k, name+":", ed25519.PublicKeySize)
	}
	return nil
}

// args are the options of a build that Sharing sets.
func (s Sharing) args() []string {
	var a []string
	if len(s.Substituters) > 0 {
		a = append(a, "--option", "extra-substituters", strings.Join(s.Substituters, " "))
	}
	if len(s.TrustedPublicKeys) > 0 {
		a = append(a, "--option", "extra-trusted-public-keys", strings.Join(s.TrustedPublicKeys, " "))
	}
	if s.Builders != "" {
		a = append(a, "--builders", s.Builders)
	}
	if s.MaxJobs != "" {
		a = append(a, "--max-jobs", s.MaxJobs)
	}
	return a
}

// storeArgs is --store STORE, or nothing for Nix's default store.
func storeArgs(store string) []string {
	if store == "" {
		return nil
	}
	return []string{"--store", store}
}

// signArgs is the argv of `nix store sign` of the closures of paths.
func signArgs(store, keyFile string, paths []string) []string {
	args := append([]string{"nix", "--extra-experimental-features", ExperimentalFeatures, "store", "sign"}, storeArgs(store)...)
	args = append(args, "--key-file", keyFile, "--recursive")
	return append(args, paths...)
}

// copyArgs is the argv of `nix copy` of the closures of paths to a
// binary cache.
func copyArgs(store, to string, paths []string) []string {
	args := append([]string{"nix", "--extra-experimental-features", ExperimentalFeatures, "copy"}, storeArgs(store)...)
	args = append(args, "--to", to)
	return append(args, paths...)
}

// Push signs the closures of paths with s.SigningKeyFile and copies them
// to the binary cache s.Push. It does nothing when s has no Push. store
// is the store the paths are in ("" for Nix's default).
func Push(ctx context.Context, s Sharing, nix, store string, paths []string) error {
	if s.Push == "" || len(paths) == 0 {
		return nil
	}
	nix, err := LookNix(nix)
	if err != nil {
		return err
	}
	if _, err := run(ctx, nix, signArgs(store, s.SigningKeyFile, paths), nil); err != nil {
		return fmt.Errorf("sign %s for %s: %w", strings.Join(paths, " "), s.Push, err)
	}
	if _, err := run(ctx, nix, copyArgs(store, s.Push, paths), nil); err != nil {
		return fmt.Errorf("push %s to %s: %w", strings.Join(paths, " "), s.Push, err)
	}
	return nil
}
