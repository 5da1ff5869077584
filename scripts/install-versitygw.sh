#!/usr/bin/env bash
# Installs versitygw, the S3-compatible server the shared-store tests
# (record/s3store, cmd/agentsandbox's store tests) run on 127.0.0.1 so that
# the remote store is tested against a real S3 implementation that is not
# ours. It builds versitygw from source through the Go module proxy into
# $(go env GOPATH)/bin, outside the repository, and only when that version is
# not there yet (or $VERSITYGW, or one on PATH, is). Idempotent. The build
# takes a few minutes: run it once per machine; the tests find the binary at
# $VERSITYGW, on PATH or in GOPATH/bin.
set -euo pipefail
version=${VERSITYGW_VERSION:-v1.8.0}
pkg=github.com/versity/versitygw/cmd/versitygw

have() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "${version#v}"; }

if [ -n "${VERSITYGW:-}" ] && have "$VERSITYGW"; then exit 0; fi
if command -v versitygw >/dev/null && have "$(command -v versitygw)"; then exit 0; fi
gobin="$(go env GOPATH | cut -d: -f1)/bin"
if have "$gobin/versitygw"; then exit 0; fi

echo "install-versitygw: building versitygw $version into $gobin (several minutes)" >&2
CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w -X main.Version=$version" "$pkg@$version"
have "$gobin/versitygw" || { echo "install-versitygw: $gobin/versitygw does not report version $version" >&2; exit 1; }
