#!/usr/bin/env bash
# Fetches Debian's generic kernel for the VM test fixture, without installing
# it: apt-get download + dpkg -x into the fixture cache
# (${AGENTSANDBOX_VMFIXTURE_CACHE:-/var/cache/agentsandbox/vmfixture}/root),
# where internal/vmfixture finds it. Idempotent; needs root.
set -euo pipefail
cache=${AGENTSANDBOX_VMFIXTURE_CACHE:-/var/cache/agentsandbox/vmfixture}
if compgen -G "$cache/root/boot/vmlinuz-*" >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "fetch-kernel: skipped (not root); the VM tests need $cache" >&2
  exit 0
fi
pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
fi
[ -n "$pkg" ] || { echo "fetch-kernel: cannot resolve linux-image-amd64's kernel package" >&2; exit 1; }
mkdir -p "$cache"
cd "$cache"
echo "fetch-kernel: $pkg into $cache" >&2
apt-get download "$pkg" >/dev/null
tmp=$(mktemp -d "$cache/unpack-XXXXXX")
dpkg -x "$(ls -1 "${pkg}"_*.deb | sort | tail -n 1)" "$tmp"
mv -T "$tmp" "$cache/root" 2>/dev/null || rm -rf "$tmp"
