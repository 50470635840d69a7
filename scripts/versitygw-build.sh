#!/usr/bin/env bash
# versitygw-build.sh builds Versity's S3 gateway (Apache-2.0), the
# S3-compatible server the S3 connector's tests run against with its POSIX
# backend (internal/testenv/s3server), into .cache/versitygw/bin (or
# $EDIHUB_VERSITYGW_BIN): the Go module github.com/versity/versitygw at the
# version below, as the Go module proxy serves it.
#
# The first build takes a few minutes on 2 cores. Afterwards the script
# returns at once while the binary is there for this version. -f forces a
# rebuild.
set -euo pipefail

version=v1.8.0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${EDIHUB_VERSITYGW_BIN:-$root/.cache/versitygw/bin}"

fail() {
	echo "versitygw-build: $*" >&2
	exit 1
}

if [[ "${1:-}" != "-f" && -x "$bin/versitygw" && -f "$bin/.version" && "$(cat "$bin/.version")" == "$version" ]]; then
	echo "versitygw-build: versitygw $version up to date in $bin"
	exit 0
fi
command -v go >/dev/null 2>&1 || fail "go not found on PATH; install Go (see go.mod for the version)"

echo "building versitygw $version into $bin (first time takes a few minutes; cached afterwards)..."
mkdir -p "$bin"
rm -f "$bin/.version"
# go install in module mode, outside this repository's module: the
# gateway's own go.mod and go.sum decide its dependencies.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$bin" GOFLAGS= go install -trimpath -ldflags "-s -w" \
	"github.com/versity/versitygw/cmd/versitygw@$version") ||
	fail "could not build github.com/versity/versitygw/cmd/versitygw@$version"
[[ -x "$bin/versitygw" ]] || fail "the build left no $bin/versitygw"
echo "$version" >"$bin/.version"
echo "versitygw-build: versitygw $version in $bin"
