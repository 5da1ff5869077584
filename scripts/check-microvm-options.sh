#!/bin/sh
# check-microvm-options.sh: check the NixOS modules agentsandbox generates
# against microvm.nix's real option declarations and assertions, with
# nixpkgs' module system, offline (scripts/check-microvm-options.nix does
# the work; docs/nixgen.md describes what is checked and what is not).
#
# Usage:
#   scripts/check-microvm-options.sh MICROVM_SRC NIXPKGS_LIB [RENDER_DIR...]
#
# MICROVM_SRC is a checkout of microvm.nix at the revision to check (the
# default pin is nixgen.DefaultMicrovmRev); NIXPKGS_LIB a checkout of
# nixpkgs or nixpkgs.lib. Either may also be a bare git repository, whose
# HEAD is used. RENDER_DIRs are directories `agentsandbox render` wrote;
# without any, every example with a nixpkgs pin is rendered (with go run)
# and checked.
#
# Needs nix-instantiate. Exit status 0 when every module evaluates, with no
# undeclared option, no ill-typed value and no failed assertion; 1
# otherwise (Nix's error says which); 2 on a usage error.
set -eu

if [ $# -lt 2 ]; then
	sed -n '2,19s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
microvm=$1
nixlib=$2
shift 2

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/asb-microvm-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# checkout DIR NAME: DIR itself, or HEAD of a bare repository unpacked.
checkout() {
	if [ -f "$1/HEAD" ] && [ -d "$1/objects" ]; then
		mkdir -p "$tmp/$2"
		git -C "$1" archive HEAD | tar -x -C "$tmp/$2"
		echo "$tmp/$2"
	else
		(cd "$1" && pwd)
	fi
}
microvm=$(checkout "$microvm" microvm)
nixlib=$(checkout "$nixlib" nixpkgs-lib)
[ -f "$microvm/nixos-modules/microvm/options.nix" ] || { echo "check-microvm-options: $microvm is not a microvm.nix checkout (no nixos-modules/microvm/options.nix)" >&2; exit 2; }
[ -f "$nixlib/lib/default.nix" ] || { echo "check-microvm-options: $nixlib is not a nixpkgs or nixpkgs.lib checkout (no lib/default.nix)" >&2; exit 2; }

if [ $# -eq 0 ]; then
	for wf in "$root"/examples/*.yaml; do
		grep -q '^nixpkgs:' "$wf" || continue
		name=$(basename "$wf" .yaml)
		(cd "$root" && go run ./cmd/agentsandbox render "$wf" -o "$tmp/render/$name" >/dev/null)
		set -- "$@" "$tmp/render/$name"
	done
fi

dirs="["
for d in "$@"; do
	[ -d "$d/envs" ] || { echo "check-microvm-options: $d has no envs/: not a render output" >&2; exit 2; }
	dirs="$dirs $(cd "$d" && pwd)"
done
dirs="$dirs ]"

nix-instantiate --eval --strict --json "$root/scripts/check-microvm-options.nix" \
	--arg microvmSrc "$microvm" --arg nixpkgsLib "$nixlib" \
	--arg guestModule "$root/modules/guest.nix" --arg dirs "$dirs"
echo
