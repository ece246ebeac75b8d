#!/bin/sh
# The daemon's own command line (daemon/main.c): `receiptd --help` matches
# tests/data/receiptd-help.txt, and the flags that once took other values
# than their file keys (issue 13) now agree with the file under
# --check-config. Usage: config-flags.sh RECEIPTD DATA_DIR
set -eu
bin=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

"$bin" --help >"$tmp/help"
if ! diff -u "$data/receiptd-help.txt" "$tmp/help"; then
	echo "receiptd --help differs from $data/receiptd-help.txt"
	fail=1
fi

# Paths in the test's own directory: --check-config checks that they can
# be created, as start would.
base="--check-config --socket $tmp/receiptd.sock --db $tmp/receipts.db"

# expect ok|refused DESCRIPTION ARGS...
expect() {
	want=$1
	shift
	# shellcheck disable=SC2086
	if "$bin" $base "$@" >"$tmp/out" 2>&1; then got=ok; else got=refused; fi
	if [ "$got" != "$want" ]; then
		echo "receiptd $*: $got, expected $want:"
		cat "$tmp/out"
		fail=1
	fi
}

# conf SECTION KEY VALUE: a file holding one key.
conf() {
	if [ -n "$1" ]; then
		printf '%s: {\n    %s = %s;\n};\n' "$1" "$2" "$3" >"$tmp/r.conf"
	else
		printf '%s = %s;\n' "$2" "$3" >"$tmp/r.conf"
	fi
}

expect refused --max-unsent-bytes 0
conf limits max_unsent 0
expect refused --config "$tmp/r.conf"
expect ok --max-unsent-bytes 4096

expect refused --query-timeout-ms 0
conf limits query_timeout 0
expect refused --config "$tmp/r.conf"
expect ok --query-timeout-ms 1

expect ok --log-level err
conf "" log_level '"err"'
expect ok --config "$tmp/r.conf"
expect ok --log-level warn
expect refused --log-level verbose

expect refused --prune-batch 0
expect ok --prune-batch 10000
expect refused --prune-batch 20000
conf store prune_batch 20000
expect refused --config "$tmp/r.conf"
conf store prune_batch 10000
expect ok --config "$tmp/r.conf"

# A flag overrides the file with a value of its own range.
conf limits max_unsent '"64KiB"'
expect ok --config "$tmp/r.conf" --max-unsent-bytes 1MiB
expect refused --config "$tmp/r.conf" --max-unsent-bytes 2GiB

[ "$fail" -eq 0 ] && echo "config-flags: flags and file keys agree"
exit "$fail"
