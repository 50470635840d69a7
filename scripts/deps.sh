#!/usr/bin/env bash
# deps.sh makes sure the machine has what edihub's stack and tests run
# against: PostgreSQL server binaries, openssl, Prometheus with promtool
# (the alert rule tests and the dashboard test), Chromium (the browser
# tests of internal/testenv/browser and the console) and Node.js with npm
# (internal/testenv/edioracle installs the independent EDI implementation
# the internal/edi tests compare with), and OpenSSH's sshd (the SFTP
# connector's tests start a private one: internal/testenv/sshserver). On a
# Debian machine
# where we are root it installs what is missing; elsewhere it says what to
# install.
#
# PostgreSQL is whichever server major version the distribution ships (15 on
# Debian 12, 17 on Debian 13): the package the "postgresql" metapackage
# depends on. internal/testenv/pgserver finds its binaries under
# /usr/lib/postgresql/<major>/bin, whatever the major.
set -euo pipefail

have_postgres() {
	command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && return 0
	compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

# Chromium is Debian's chromium package, at /usr/bin/chromium, where
# internal/testenv/browser looks first (then for chromium on PATH).
# sshd is Debian's openssh-server, at /usr/sbin/sshd (not on every PATH),
# where internal/testenv/sshserver looks first.
have_sshd() {
	[[ -x /usr/sbin/sshd ]] || command -v sshd >/dev/null 2>&1
}

have_chromium() {
	[[ -x /usr/bin/chromium ]] || command -v chromium >/dev/null 2>&1
}

# postgres_package prints the versioned server package the distribution's
# "postgresql" metapackage depends on (postgresql-15, postgresql-17, ...),
# or the metapackage itself when apt cannot tell.
postgres_package() {
	local pkg
	pkg="$(apt-cache depends postgresql 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^postgresql-[0-9]+$/ {print $2; exit}')"
	echo "${pkg:-postgresql}"
}

# deps.sh --postgres-package prints the package it would install (tests).
if [[ ${1:-} == --postgres-package ]]; then
	postgres_package
	exit 0
fi

missing=()
have_postgres || missing+=(postgresql)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || missing+=(prometheus)
have_chromium || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# python3 runs C zlib for the parallel deflate's test (internal/as2/cms).
command -v python3 >/dev/null 2>&1 || missing+=(python3)
have_sshd || missing+=(openssh-server)

if ((${#missing[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	packages=()
	for p in "${missing[@]}"; do
		if [[ $p == postgresql ]]; then
			p="$(postgres_package)"
		fi
		packages+=("$p")
	done
	echo "deps: installing ${packages[*]} with apt-get"
	apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
	exit 0
fi
echo "deps: missing ${missing[*]}; install them (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
exit 1
