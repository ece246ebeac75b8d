#!/bin/sh
# Smoke test of the Debian package, for CI on a clean Debian 12 machine
# (root, no network beyond Debian's packages):
#
#   systemd/deb-smoke.sh DEB_DIR
#
# takes receiptd_*.deb from DEB_DIR (built by scripts/build-deb.sh),
# installs it with apt, checks the user, directories and conffile the
# package sets up, runs the installed daemon with the installed
# configuration (through systemd's socket activation when systemd is the
# running init, else as the receiptd user by hand), checks that
# `receiptctl ping` answers on the packaged socket and that a user outside
# the socket's group is refused, sends a receipt in with the installed
# receiptctl and reads it back out with a query, then purges the package
# and checks that its files are gone. The receiptd user and
# /var/lib/receiptd survive a purge by design; this script removes them
# too, but only if it created them.
set -eu

debs=${1:?usage: deb-smoke.sh DEB_DIR}
sock=/run/receiptd/receiptd.sock
vector=$(cd "$(dirname "$0")/.." && pwd)/tests/data/vectors/s2_seed_roundtrip.json

if [ "$(id -u)" -ne 0 ]; then
	echo "deb-smoke: needs root (it installs a package)" >&2
	exit 1
fi
if dpkg-query -W -f='${Status}' receiptd 2>/dev/null | grep -q "installed"; then
	echo "deb-smoke: receiptd is already installed here; not touching it" >&2
	exit 1
fi
had_user=0
id receiptd >/dev/null 2>&1 && had_user=1
had_state=0
[ -e /var/lib/receiptd ] && had_state=1

# apt takes a local file only as a path with a slash: make it absolute.
deb=$(cd "$debs" && ls "$PWD"/receiptd_*.deb)
echo "== package $deb"
dpkg-deb -f "$deb" Package Version Depends Installed-Size

daemon_pid=""
# shellcheck disable=SC2317 # called through the trap
cleanup() {
	if [ -n "$daemon_pid" ]; then
		kill "$daemon_pid" 2>/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl stop receiptd.service receiptd.socket 2>/dev/null || true
	fi
	apt-get purge -y -qq receiptd >/dev/null 2>&1 || true
	if [ "$had_state" -eq 0 ]; then
		rm -rf /var/lib/receiptd
	fi
	rm -rf /run/receiptd
	if [ "$had_user" -eq 0 ] && id receiptd >/dev/null 2>&1; then
		userdel receiptd || true
		if getent group receiptd >/dev/null; then
			groupdel receiptd || true
		fi
	fi
}
trap cleanup EXIT INT TERM

echo "== apt install"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null

fail=0
check() {
	if eval "$2"; then
		echo "ok: $1"
	else
		echo "FAIL: $1"
		fail=1
	fi
}
check "system user receiptd" "id receiptd >/dev/null 2>&1"
check "state directory owned by receiptd" \
	"[ \"\$(stat -c %U:%a /var/lib/receiptd)\" = receiptd:750 ]"
check "/etc/receiptd/receiptd.conf is a conffile" \
	"dpkg-query -W -f='\${Conffiles}' receiptd | grep -q /etc/receiptd/receiptd.conf"
daemon=$(dpkg -L receiptd | grep -E '/s?bin/receiptd$' | head -n 1)
check "the daemon is installed ($daemon)" "[ -x \"$daemon\" ]"
unit=$(dpkg -L receiptd | grep '/systemd/system/receiptd.service$')
unit_exec=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
check "the unit starts the installed binary ($unit_exec)" \
	"[ \"$unit_exec\" = \"$daemon\" ]"
# Where systemd runs, postinst has started the socket by now: check the
# file as a reload would (--for-reload expects the socket to be served).
if [ -d /run/systemd/system ]; then for_reload=--for-reload; else for_reload=; fi
check "the packaged configuration validates" \
	"\"$daemon\" --config /etc/receiptd/receiptd.conf --check-config $for_reload >/dev/null"

if [ -d /run/systemd/system ]; then
	echo "== start through receiptd.socket (systemd is running)"
	systemctl start receiptd.socket
else
	echo "== no running systemd: start the daemon by hand as receiptd"
	mkdir -p /run/receiptd
	chown receiptd:receiptd /run/receiptd
	setpriv --reuid=receiptd --regid=receiptd --init-groups \
		"$daemon" --config /etc/receiptd/receiptd.conf &
	daemon_pid=$!
	i=0
	while [ ! -S "$sock" ] && [ "$i" -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
fi

check "receiptctl ping as root" "receiptctl ping >/dev/null 2>&1"
check "socket mode 0660, group receiptd" \
	"[ \"\$(stat -c %a:%G $sock)\" = 660:receiptd ]"
check "a user outside the group is refused" \
	"! setpriv --reuid=nobody --regid=nogroup --clear-groups receiptctl ping >/dev/null 2>&1"

echo "== a receipt in, a query out"
check "receiptctl import stores the receipt" \
	"receiptctl import \"$vector\" >/dev/null"
check "receiptctl receipts returns it" \
	"receiptctl receipts --model model-1 --format json | grep -q '\"prepared_plan_id\": *\"plan-1\"'"
check "stats counts it" \
	"receiptctl stats --format json | grep -q '\"accepted\": *1[,}]'"

if [ -n "$daemon_pid" ]; then
	kill -TERM "$daemon_pid"
	wait "$daemon_pid" && st=0 || st=$?
	daemon_pid=""
	check "the daemon exits 0 on SIGTERM" "[ $st -eq 0 ]"
fi

echo "== apt purge"
if [ -d /run/systemd/system ]; then
	systemctl stop receiptd.service receiptd.socket 2>/dev/null || true
fi
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq receiptd >/dev/null
check "purged: no binaries, units or configuration left" \
	"[ ! -e /usr/sbin/receiptd ] && [ ! -e /usr/bin/receiptctl ] &&
	 [ ! -e \"$unit\" ] && [ ! -e /etc/receiptd/receiptd.conf ]"
check "purged: dpkg no longer knows the package" \
	"! dpkg-query -W -f='\${Status}' receiptd 2>/dev/null | grep -q installed"

exit "$fail"
