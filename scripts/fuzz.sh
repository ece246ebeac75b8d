#!/bin/sh
# Builds the libFuzzer targets with clang (build-fuzz/) and fuzzes each one
# for SECONDS (default 60) over a scratch copy of its checked-in corpus.
#   scripts/fuzz.sh [SECONDS]
# FUZZ_OTHER_SECONDS, when set, is the time for every target but fuzz_frame
# (the one over frames, envelopes and receipts), so CI can give that one its
# full minute and the others less.
# fuzz_conn keeps a SQLite store in a directory of its own under
# FUZZ_CONN_TMPDIR, set here to a directory removed afterwards (on tmpfs
# when there is one), so a crash leaves no store behind.
# Fails when a target finds a crash, leak or sanitizer report; the input is
# saved as build-fuzz/crashes/<target>-crash-<sha1>. Fix the bug, then copy
# that file into tests/fuzz/corpus/<target>/ so check_fuzz_replay keeps it.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
case $secs in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDS]" >&2
	exit 2
	;;
esac

cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cc" ]; then
	echo "fuzz.sh: clang not found; run scripts/install-deps.sh" >&2
	exit 1
fi

# Warnings are errors in the gcc builds that the test suite runs; here they
# would only stop the fuzzing over a clang-only diagnostic.
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$cc" -DRECEIPTD_FUZZ=ON \
	-DRECEIPTD_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

targets=""
for src in tests/fuzz/fuzz_*.c; do
	t=$(basename "$src" .c)
	targets="$targets $t"
done
for t in $targets; do
	cmake --build build-fuzz -j 2 --target "$t"
done

mkdir -p build-fuzz/crashes
status=0
for t in $targets; do
	name=${t#fuzz_}
	scratch=$(mktemp -d)
	if [ -d "tests/fuzz/corpus/$name" ]; then
		cp "tests/fuzz/corpus/$name"/* "$scratch"/ 2>/dev/null || true
	fi
	t_secs=$secs
	if [ "$t" != fuzz_frame ] && [ -n "${FUZZ_OTHER_SECONDS:-}" ]; then
		t_secs=$FUZZ_OTHER_SECONDS
	fi
	store=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
	echo "== $t: ${t_secs}s over $(find "$scratch" -type f | wc -l) seeds"
	if ! FUZZ_CONN_TMPDIR=$store "build-fuzz/tests/fuzz/$t" \
		-max_total_time="$t_secs" -max_len=65536 \
		-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="build-fuzz/crashes/$t-" "$scratch"; then
		echo "fuzz.sh: $t failed; inputs in build-fuzz/crashes/" >&2
		status=1
	fi
	rm -rf "$scratch" "$store"
done
exit $status
