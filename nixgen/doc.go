// Package nixgen compiles a workflow into a Nix flake: one NixOS microVM
// (microvm.nix) per distinct Environment of its steps, and one buildEnv of
// that environment's packages for the namespace backend, all from the
// workflow's pinned nixpkgs. Steps that share an environment share the
// system, the runner and the buildEnv; their names reach the guest at run
// time in job.json.
//
// Generate returns the files of the generated directory (flake.nix,
// envs/<env>.nix and tcg.nix) in a fixed order; the same workflow always
// gives the same bytes. The Nix text comes from the text/templates in package templates.
// Every user-provided string is written through String, the one escaping
// function; templates only print values this package has already rendered
// as Nix.
//
// The package is pure: it neither runs Nix nor touches the host, apart from
// Files.WriteDir. RunnerAttr and EnvAttr name the flake outputs the realiser
// builds. docs/nixgen.md describes the generated flake.
package nixgen
