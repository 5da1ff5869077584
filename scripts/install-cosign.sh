#!/usr/bin/env bash
# Installs cosign, which the cosign test tier (record/provenance,
# TestCosignVerifiesAttestation) runs to check our attestations with an
# implementation that is not ours. It builds cosign from source through the
# Go module proxy into $(go env GOPATH)/bin, outside the repository, and only
# when that version is not there yet (or $COSIGN, or one on PATH, is).
# Idempotent. The build is heavy (about 1,000 packages): run it once per
# machine; the test finds the binary at $COSIGN, on PATH or in GOPATH/bin.
set -euo pipefail
version=${COSIGN_VERSION:-v3.1.3}
pkg=github.com/sigstore/cosign/v3/cmd/cosign

have() { [ -x "$1" ] && "$1" version 2>/dev/null | grep -q "GitVersion:.*${version#v}"; }

if [ -n "${COSIGN:-}" ] && have "$COSIGN"; then exit 0; fi
if command -v cosign >/dev/null && have "$(command -v cosign)"; then exit 0; fi
gobin="$(go env GOPATH | cut -d: -f1)/bin"
if have "$gobin/cosign"; then exit 0; fi

echo "install-cosign: building cosign $version into $gobin (several minutes)" >&2
CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "$pkg@$version"
have "$gobin/cosign" || { echo "install-cosign: $gobin/cosign does not report version $version" >&2; exit 1; }
