#!/usr/bin/env bash
# mailpit-build.sh builds Mailpit, the SMTP catcher of make run (a web UI
# where the end-of-day report mail can be read), into .cache/mailpit/bin (or
# $EDIHUB_MAILPIT_BIN): the Go module github.com/axllent/mailpit at the
# version below, its web UI assets built with npm from its own package.json
# (npm ci: the versions of its package-lock.json).
#
# The first build takes a few minutes (npm install, then a Go build with a
# pure-Go SQLite). Afterwards the script returns at once while the binary
# is there for this version. -f forces a rebuild.
set -euo pipefail

version=v1.27.11
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${EDIHUB_MAILPIT_BIN:-$root/.cache/mailpit/bin}"
work="$root/.cache/mailpit/src-$version"

fail() {
	echo "mailpit-build: $*" >&2
	exit 1
}

if [[ "${1:-}" != "-f" && -x "$bin/mailpit" && -f "$bin/.version" && "$(cat "$bin/.version")" == "$version" ]]; then
	echo "mailpit-build: mailpit $version up to date in $bin"
	exit 0
fi
command -v go >/dev/null 2>&1 || fail "go not found on PATH; install Go (see go.mod for the version)"
command -v npm >/dev/null 2>&1 || fail "npm not found on PATH; install Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)"

echo "building mailpit $version into $bin (first time takes a few minutes; cached afterwards)..."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The module's source, as the Go module proxy serves it, in a writable copy.
dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/axllent/mailpit@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -n "$dir" && -f "$dir/package.json" ]] || fail "could not download github.com/axllent/mailpit@$version"
rm -rf "$work"
mkdir -p "$work" "$bin"
cp -R "$dir/." "$work/"
chmod -R u+w "$work"
cd "$work"
npm ci --no-audit --no-fund --loglevel=error
npm run build --silent
[[ -d server/ui/dist ]] || fail "npm run build made no server/ui/dist"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/axllent/mailpit/config.Version=$version" -o "$bin/mailpit" .
echo "$version" >"$bin/.version"
rm -rf "$work/node_modules"
echo "mailpit-build: mailpit $version in $bin"
