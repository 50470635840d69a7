#!/usr/bin/env bash
# controlplane-build.sh builds the kube-apiserver and etcd binaries that
# edihub's Kubernetes tests run (package test/controlplane), from the separate
# Go module test/k8s, into .cache/controlplane/bin (or $EDIHUB_CONTROLPLANE_BIN).
#
# The first build compiles Kubernetes from source: about 6 minutes and 3 GiB
# of Go build cache on 2 cores. Afterwards the script returns in well under a
# second while the binaries are newer than every file of test/k8s, and the Go
# build cache keeps a rebuild after a change short. -f forces a rebuild.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$root/test/k8s"
bin="${EDIHUB_CONTROLPLANE_BIN:-$root/.cache/controlplane/bin}"
binaries=(kube-apiserver etcd)

fail() {
	echo "controlplane-build: $*" >&2
	exit 1
}

command -v go >/dev/null 2>&1 || fail "go not found on PATH; install Go (see go.mod for the version)"
[[ -f "$module/go.mod" ]] || fail "$module/go.mod not found"

up_to_date() {
	local b
	for b in "${binaries[@]}"; do
		[[ -x "$bin/$b" ]] || return 1
		# Any module file (go.mod, go.sum, main packages) newer than the binary.
		if [[ -n "$(find "$module" -type f -newer "$bin/$b" -print -quit)" ]]; then
			return 1
		fi
	done
}

if [[ "${1:-}" != "-f" ]] && up_to_date; then
	echo "controlplane-build: kube-apiserver and etcd up to date in $bin"
	exit 0
fi

cd "$module"
kube_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" ||
	fail "cannot resolve k8s.io/kubernetes from $module/go.mod"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)" ||
	fail "cannot resolve go.etcd.io/etcd/server/v3 from $module/go.mod"

# kube-apiserver reports its version from these variables (set the same way
# as Kubernetes' own hack/lib/version.sh); without them /version says v0.0.0.
minor="${kube_version#v*.}"
minor="${minor%%.*}"
major="${kube_version#v}"
major="${major%%.*}"
ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

echo "building kube-apiserver $kube_version and etcd $etcd_version into $bin" \
	"(first time takes ~6 min and ~3 GiB of build cache, cached afterwards)..."

mkdir -p "$bin"
# Build next to the destination and rename, so that an interrupted build never
# leaves a truncated binary that looks up to date.
tmp="$(mktemp -d "$bin/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

start=$SECONDS
if ! go build -buildvcs=false -ldflags "$ldflags" -o "$tmp/" ./cmd/kube-apiserver ./cmd/etcd; then
	fail "go build in test/k8s failed (see the errors above)"
fi
for b in "${binaries[@]}"; do
	mv -f "$tmp/$b" "$bin/$b"
done
echo "controlplane-build: built ${binaries[*]} in $((SECONDS - start))s"
