#!/usr/bin/env bash
# Installs what agentsandbox and its tests need on a Debian machine, idempotently:
# Debian packages (as root), Go modules, and the VM test fixture's kernel.
# Run by `make run`, `make test` and .ci/run; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  patchelf          # scripts/install-nix.sh: Debian 13's Nix in a private prefix
  bash-static       # Nix's sandbox gives builders /usr/bin/bash-static as /bin/sh
  e2fsprogs         # mkfs.ext4 for the workspace quota image
  qemu-system-x86   # vm isolation (software emulation here)
  busybox-static    # VM test fixture initramfs; offline Nix test flakes
  bubblewrap        # bwrap, the baseline the apply benchmarks are measured beside
  iproute2          # ip netns, for people inspecting runs
  git               # git inputs
  python3           # the Python client's tests (clients/python); python3-minimal lacks
                    # json, http.client and unittest
  nodejs            # the JS client's and the MCP server's tests (clients/js, server/mcp)
  $(command -v npm >/dev/null || echo npm) # npm ci for them; NodeSource's nodejs ships its own npm
                    # and conflicts with Debian's, so only ask for Debian's when none is on PATH
  ca-certificates
  curl              # server tests: a real HTTP client over the unix socket (peer credentials)
  openssl           # scripts/install-node.sh checks the Node tarball's sha512
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Node.js 22 (or 20.18.1+) for the JS tests; Debian 12's nodejs is 18: see
# scripts/install-node.sh.
./scripts/install-node.sh

# Nix 2.18 or later (Debian 12's nix-bin is 2.8, which today's nixpkgs
# refuses) and its build users: see scripts/install-nix.sh.
./scripts/install-nix.sh

# Nix's build users and every job (uid 65534) must be able to traverse /.
# Debian's / is 0755; a root unpacked from a tarball made in a mktemp
# directory (some chroots and container images) is 0700, and then every
# Nix build fails with "Permission denied" on its own builder.
if [ "$(id -u)" -eq 0 ] && [ "$(( 0$(stat -c %a /) & 05 ))" -ne 5 ]; then
  echo "setup: / is mode $(stat -c %a /), which locks out Nix's build users and jobs; making it 0755 as Debian ships it" >&2
  chmod 0755 /
fi

go mod download

# The VM test fixture boots Debian's generic kernel; fetch it without installing it.
if [ -x scripts/fetch-kernel.sh ]; then
  scripts/fetch-kernel.sh
fi
