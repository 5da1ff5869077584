package main

import (
	"github.com/agentsandbox/agentsandbox/nixbuild"
	"github.com/spf13/pflag"
)

// nixShareFlags are the flags of commands that realise with Nix (apply,
// rerun, serve) for sharing realisations between machines: binary caches
// to substitute from, remote builders, and a cache to push to
// (docs/nix-cache.md).
type nixShareFlags struct {
	substituters []string
	keys         []string
	builders     string
	maxJobs      string
	push         string
	signingKey   string
}

func (n *nixShareFlags) AddFlags(f *pflag.FlagSet) {
	f.StringArrayVar(&n.substituters, "substituter", nil, "a binary cache to take realised paths from before building (https://, file://; repeatable; needs --trusted-public-key)")
	f.StringArrayVar(&n.keys, "trusted-public-key", nil, "NAME:BASE64, a key substituted paths must be signed by (repeatable; 'nix key convert-secret-to-public' prints one)")
	f.StringVar(&n.builders, "builders", "", "Nix's remote builders, such as 'ssh://builder x86_64-linux' (passed to nix build --builders)")
	f.StringVar(&n.maxJobs, "max-jobs", "", "Nix's --max-jobs: 0 builds nothing here (every path is substituted or built remotely)")
	f.StringVar(&n.push, "push-cache", "", "a binary cache (a Nix store URL such as file:///srv/nix-cache) every realised closure is pushed to, signed with --signing-key")
	f.StringVar(&n.signingKey, "signing-key", "", "the secret key ('nix key generate-secret') that signs what --push-cache pushes")
}

// Sharing is the flags as nixbuild's Sharing, checked.
func (n *nixShareFlags) Sharing() (nixbuild.Sharing, error) {
	s := nixbuild.Sharing{Substituters: n.substituters, TrustedPublicKeys: n.keys, Builders: n.builders,
		MaxJobs: n.maxJobs, Push: n.push, SigningKeyFile: n.signingKey}
	if err := s.Check(); err != nil {
		return nixbuild.Sharing{}, invalid(err)
	}
	return s, nil
}
