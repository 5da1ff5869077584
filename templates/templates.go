// Package templates holds the text/templates nixgen renders into a
// workflow's flake: flake.nix.tmpl (the flake), env.nix.tmpl (one NixOS
// module per distinct environment) and tcg.nix.tmpl (software emulation).
// They print only values nixgen has already rendered as Nix (escaped string
// literals, numbers), never raw user strings.
package templates

import "embed"

// FS holds every *.tmpl file of this directory.
//
//go:embed *.tmpl
var FS embed.FS
