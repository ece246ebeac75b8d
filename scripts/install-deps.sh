#!/bin/sh
# Installs everything receiptd needs to build, test and run, from Debian's
# packages only. Idempotent: safe to run again; it installs only what is
# missing. Needs root (or sudo) on a Debian 12 machine.
set -eu

PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev clang-format \
libuv1-dev libmsgpack-dev libsqlite3-dev sqlite3 check libsystemd-dev \
libjson-c-dev libconfig-dev nettle-dev libroaring-dev libsmartcols-dev \
libpq-dev postgresql-15 libmicrohttpd-dev libncurses-dev libssl-dev openssl systemd \
dpkg-dev file \
python3 python3-msgpack cargo rustc librust-serde-dev librust-serde-derive-dev \
librust-rmp-serde-dev librust-rmp-dev librust-openssl-dev rustfmt debhelper lintian \
prometheus"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
$SUDO apt-get update -qq || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
