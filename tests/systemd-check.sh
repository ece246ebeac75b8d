#!/bin/sh
# CTest test systemd_check: the units in systemd/ pass `systemd-analyze
# verify` without a single warning, the man pages they point at exist, and
# receiptd.service scores an overall exposure of at most 1.5 in
# `systemd-analyze security --offline=true`.
#
#   tests/systemd-check.sh SYSTEMD_DIR DOCS_DIR [RECEIPTD_BINARY]
#
# verify runs against a staged root (--root) that holds the host's own
# units (for sysinit.target and friends), the daemon binary (the built one
# when given, else a stand-in: verify only checks that it is executable)
# and our man pages, so it needs neither a running systemd nor an installed
# package. Nothing is skipped silently: a missing tool is a failure.
set -eu

units=${1:?usage: systemd-check.sh SYSTEMD_DIR DOCS_DIR [RECEIPTD_BINARY]}
docs=${2:?usage: systemd-check.sh SYSTEMD_DIR DOCS_DIR [RECEIPTD_BINARY]}
binary=${3:-}
max_exposure=1.5

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "FAIL: systemd-analyze not found (Debian package systemd;" \
		"scripts/install-deps.sh installs it)"
	exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT INT TERM

host_units=/usr/lib/systemd/system
[ -d "$host_units" ] || host_units=/lib/systemd/system
mkdir -p "$stage/usr/lib/systemd" "$stage/etc/systemd/system" \
	"$stage/usr/bin" "$stage/usr/sbin" "$stage/bin" "$stage/usr/share/man/man8" \
	"$stage/usr/share/man/man5"
cp -a "$host_units" "$stage/usr/lib/systemd/"
cp "$units/receiptd.service" "$units/receiptd.socket" \
	"$stage/etc/systemd/system/"
if [ -n "$binary" ] && [ -x "$binary" ]; then
	cp "$binary" "$stage/usr/sbin/receiptd"
else
	printf '#!/bin/sh\nexit 0\n' >"$stage/usr/sbin/receiptd"
	chmod 755 "$stage/usr/sbin/receiptd"
fi
# ExecReload= runs /bin/kill (procps); `command -v kill` names the builtin.
for k in /bin/kill /usr/bin/kill; do
	if [ -x "$k" ]; then
		cp "$k" "$stage/bin/kill"
		break
	fi
done
cp "$docs/receiptd.8" "$stage/usr/share/man/man8/"
cp "$docs/receiptd.conf.5" "$stage/usr/share/man/man5/"

fail=0

echo "== systemd-analyze verify (root $stage)"
# Unknown keys and unparsable values are only warnings to verify (exit
# status 0), so any output at all counts as a failure. The man pages of
# Documentation= are looked up in the staged tree with man(1); a machine
# without man-db gets the same check done here on the files.
man_opt=--man=yes
if ! command -v man >/dev/null 2>&1; then
	echo "man(1) not installed: checking Documentation= pages as files"
	man_opt=--man=no
	for page in $(sed -n 's/^Documentation=//p' "$units/receiptd.service" \
		"$units/receiptd.socket" | tr ' ' '\n' | sed -n 's/^man://p'); do
		name=${page%%(*}
		section=${page#*(}
		section=${section%)}
		if [ ! -f "$stage/usr/share/man/man$section/$name.$section" ]; then
			echo "FAIL: Documentation= names $page, which is not in $docs"
			fail=1
		fi
	done
fi
out=$(MANPATH="$stage/usr/share/man" systemd-analyze verify "$man_opt" \
	--root="$stage" receiptd.service receiptd.socket 2>&1) || fail=1
if [ -n "$out" ]; then
	printf '%s\n' "$out"
	fail=1
fi
if [ "$fail" -eq 0 ]; then
	echo "verify: clean"
fi

echo "== systemd-analyze security --offline=true"
report=$(systemd-analyze security --offline=true --no-pager \
	"$units/receiptd.service" 2>&1) || true
printf '%s\n' "$report" | grep -E '^✗|Overall' || true
exposure=$(printf '%s\n' "$report" |
	sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p')
if [ -z "$exposure" ]; then
	echo "FAIL: no overall exposure level in the output above"
	printf '%s\n' "$report" | tail -5
	fail=1
elif awk -v e="$exposure" -v m="$max_exposure" 'BEGIN { exit !(e > m) }'; then
	echo "FAIL: exposure $exposure is above $max_exposure"
	fail=1
else
	echo "exposure $exposure <= $max_exposure: OK"
fi

exit "$fail"
