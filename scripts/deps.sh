#!/usr/bin/env bash
# deps.sh makes sure the machine has what edihub's stack and tests run
# against: PostgreSQL server binaries and openssl. On a Debian machine where
# we are root it installs what is missing; elsewhere it says what to install.
set -euo pipefail

have_postgres() {
	command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && return 0
	compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

missing=()
have_postgres || missing+=(postgresql-15)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)

if ((${#missing[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "deps: installing ${missing[*]} with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	exit 0
fi
echo "deps: missing ${missing[*]}; install them (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
exit 1
