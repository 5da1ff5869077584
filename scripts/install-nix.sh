#!/usr/bin/env bash
# Installs a Nix that today's nixpkgs accepts (2.18 or later), idempotently.
#
# nixpkgs' lib has refused Nix older than 2.18 since 2025-08 (lib/minver.nix,
# later lib/minfeatures.nix), and microvm.nix's store disk needs
# unsafeDiscardReferences, stable from 2.18. Debian 12's nix-bin is 2.8.
#
#   - A Nix of 2.18 or later already on PATH is kept as it is.
#   - Debian 13 or later: its own nix-bin (2.26) with apt.
#   - Debian 12: Debian 13's nix-bin 2.26.3, unpacked into a private prefix
#     ($AGENTSANDBOX_NIX_PREFIX, default /opt/agentsandbox/nix-VERSION) with
#     the Debian 13 libraries it links (libc 2.41, libstdc++ 14, the t64
#     libraries), its interpreter and rpath set to that prefix with
#     patchelf, and linked as /usr/local/bin/nix*. Installing it with apt
#     instead would upgrade the host's libc and C++ runtime under every
#     other program; the prefix leaves the host's libraries alone and is
#     removed with one rm -rf. Packages come from the host's own Debian
#     mirror (suite trixie), looked up with a private apt state under
#     /var/cache/agentsandbox/nix-apt, so the host's apt sources and lists
#     are never changed; apt checks them against Debian's signed index.
#
# Either way Nix's build users (group nixbld, nixbld1-10) exist afterwards,
# as Debian's nix-setup-systemd makes them, and /etc/nix/nix.conf exists.
# Run as root by scripts/setup.sh; safe to run again.
set -euo pipefail

version=2.26.3
suite=trixie
prefix=${AGENTSANDBOX_NIX_PREFIX:-/opt/agentsandbox/nix-$version}
bindir=/usr/local/bin
cache=/var/cache/agentsandbox/nix-apt
names=(nix nix-build nix-channel nix-collect-garbage nix-copy-closure nix-daemon nix-env nix-hash
  nix-instantiate nix-prefetch-url nix-shell nix-store)

say() { echo "install-nix: $*" >&2; }
die() { say "$*"; exit 1; }

# nix_at_least BIN: BIN is a Nix whose version is 2.18 or later.
nix_at_least() {
  local v
  v=$("$1" --version 2>/dev/null | awk '{print $NF; exit}') || return 1
  [ -n "$v" ] && [ "$(printf '%s\n2.18\n' "$v" | sort -V | head -n1)" = 2.18 ]
}

build_users() {
  getent group nixbld >/dev/null || groupadd --system nixbld
  local n
  for n in $(seq 1 10); do
    id "nixbld$n" >/dev/null 2>&1 && continue
    useradd --system --comment "Nix build user $n" --home-dir /var/empty \
      --gid nixbld --groups nixbld --no-user-group --shell /usr/sbin/nologin "nixbld$n"
  done
  if [ ! -e /etc/nix/nix.conf ]; then
    mkdir -p /etc/nix
    printf '%s\n' '# Written by agentsandbox scripts/install-nix.sh; see nix.conf(5).' \
      'build-users-group = nixbld' > /etc/nix/nix.conf
  fi
}

# Our own prefix, complete from an earlier run.
if [ "$(id -u)" -eq 0 ] && [ -f "$prefix/.installed" ] && nix_at_least "$prefix/usr/bin/nix"; then
  for n in "${names[@]}"; do ln -sfn "$prefix/usr/bin/nix" "$bindir/$n"; done
  build_users
  exit 0
fi
# Someone else's Nix that is new enough.
if p=$(command -v nix) && nix_at_least "$p"; then
  [ "$(id -u)" -ne 0 ] || build_users
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "no Nix 2.18 or later on PATH; run as root to install one into $prefix (it also adds Nix's build users)"

. /etc/os-release
if [ "${ID:-}" = debian ] && [ "${VERSION_ID:-0}" -ge 13 ] 2>/dev/null; then
  say "installing Debian's nix-bin"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nix-bin >/dev/null
  build_users
  exit 0
fi
if [ "${VERSION_CODENAME:-}" != bookworm ]; then
  die "no Nix 2.18 or later here, and this script only knows how to get one on Debian 12 and 13
(this is ${PRETTY_NAME:-an unknown system}): install Nix from https://nixos.org/download and run setup again"
fi

# patchelf sets the prefix's interpreter and rpath; Nix's sandbox binds
# /usr/bin/bash-static as the builders' /bin/sh. setup.sh installs both.
if ! command -v patchelf >/dev/null || [ ! -x /usr/bin/bash-static ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf bash-static >/dev/null
fi

# The host's Debian mirror, from its own apt sources (deb822 or one-line).
mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
[ -n "$mirror" ] || die "cannot find the host's Debian mirror in /etc/apt/sources.list{,.d}"

mkdir -p "$cache/lists/partial" "$cache/archives/partial" "$cache/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" > "$cache/sources.list"
: > "$cache/status" # an empty system: apt resolves every library nix-bin needs
apt_opts=(-o Dir::Etc::sourcelist="$cache/sources.list" -o Dir::Etc::sourceparts=-
  -o Dir::State::Lists="$cache/lists" -o Dir::Cache="$cache" -o Dir::State::status="$cache/status"
  -o Dir::Etc::preferences="$cache/none" -o Dir::Etc::preferencesparts="$cache/none.d" -o APT::Install-Recommends=false
  -o Acquire::Languages=none -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false)
say "looking up nix-bin in Debian $suite"
apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 || apt-get "${apt_opts[@]}" update -qq
have=$(apt-cache "${apt_opts[@]}" policy nix-bin | awk '/Candidate:/{print $2}')
case "$have" in
  "$version"+*) ;;
  *) die "Debian $suite's mirror offers nix-bin '${have:-none}', not $version: set version= in $0 to it and try again" ;;
esac
# nix-bin and the shared libraries of its dependency closure (not the
# programs and Perl modules nix-bin also depends on: nix links none of them).
mapfile -t pkgs < <(apt-get "${apt_opts[@]}" install -s nix-bin 2>/dev/null |
  awk '/^Inst /{print $2"="substr($3,2)}' | grep -E '^(lib[^=]*|zlib1g|nix-bin)=' | grep -v perl)
[ ${#pkgs[@]} -gt 10 ] || die "could not resolve nix-bin's libraries from Debian $suite (got: ${pkgs[*]:-nothing})"
say "downloading nix-bin $version and ${#pkgs[@]} Debian $suite packages it links"
(cd "$cache/debs" && rm -f ./*.deb && apt-get "${apt_opts[@]}" download "${pkgs[@]}" >/dev/null 2>&1) ||
  (cd "$cache/debs" && apt-get "${apt_opts[@]}" download "${pkgs[@]}")

if [ -e "$prefix" ] && [ ! -e "$prefix/.partial" ] && [ ! -e "$prefix/.installed" ]; then
  die "$prefix exists and is not a Nix this script installed: move it away or set AGENTSANDBOX_NIX_PREFIX"
fi
rm -rf "$prefix"
mkdir -p "$prefix"
touch "$prefix/.partial"
for d in "$cache"/debs/*.deb; do dpkg-deb -x "$d" "$prefix"; done
libdirs="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu"
loader=$prefix/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -e "$loader" ] || loader=$prefix/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -e "$loader" ] || die "Debian $suite's libc6 has no ld-linux-x86-64.so.2 where expected"
# DT_RPATH, not DT_RUNPATH: it is searched for the libraries' own
# dependencies too, before the host's ld.so.cache.
patchelf --set-interpreter "$loader" --force-rpath --set-rpath "$libdirs" "$prefix/usr/bin/nix"

# Every library nix loads must be the prefix's own, never the host's.
outside=$(LD_TRACE_LOADED_OBJECTS=1 "$prefix/usr/bin/nix" | awk '/=>/{print $3}' | grep -v "^$prefix/" || true)
[ -z "$outside" ] || die "nix in $prefix would load host libraries: $outside"
nix_at_least "$prefix/usr/bin/nix" || die "$prefix/usr/bin/nix does not run: $("$prefix/usr/bin/nix" --version 2>&1)"
echo "nix-bin $version from Debian $suite; installed by agentsandbox scripts/install-nix.sh" > "$prefix/.installed"
rm -f "$prefix/.partial"

for n in "${names[@]}"; do ln -sfn "$prefix/usr/bin/nix" "$bindir/$n"; done
build_users
say "$("$bindir/nix" --version) in $prefix, linked from $bindir"
if old=$(PATH=/usr/bin:/bin command -v nix) && [ "$old" != "$bindir/nix" ]; then
  say "note: an older $old is still installed ($("$old" --version 2>/dev/null)); $bindir comes first on PATH"
fi
