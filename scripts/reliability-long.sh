#!/bin/sh
# The long reliability runs, outside CI (CI runs the short variants through
# ctest): 1,000 kills of the daemon under load, every I/O fault injected into
# the real daemon (CI takes every fifth), the hostile corpus, and the
# power-loss, I/O-fault and allocation-failure sweeps, in the normal build
# and, with --sanitize, under AddressSanitizer and UBSan.
#   scripts/reliability-long.sh [--sanitize] [KILLS]
# KILLS defaults to 1000. RELIABILITY_SEED=N replays a kill loop. Longer
# fuzzing runs with scripts/fuzz.sh SECONDS when that script exists.
set -eu
cd "$(dirname "$0")/.."

build=build
opts=""
if [ "${1:-}" = "--sanitize" ]; then
	build=build-asan
	opts="-DRECEIPTD_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"
	shift
fi
kills=${1:-1000}

# shellcheck disable=SC2086
cmake -S . -B "$build" $opts >/dev/null
cmake --build "$build" -j "$(nproc)" --target receiptd e2e_killloop \
	e2e_hostile e2e_powerloss e2e_writer_only check_powerloss check_fault \
	check_oom check_hostile

# Every I/O fault injected into the real daemon, not every fifth (the
# in-process sweeps of check_fault try every N in CI already), and every
# allocation failed, not every 8th or 64th (check_oom then takes about half
# an hour).
export RELIABILITY_FAULT_STRIDE=1
export RELIABILITY_OOM_EXHAUSTIVE=1
for t in check_powerloss check_fault check_oom check_hostile e2e_hostile \
	e2e_powerloss e2e_writer_only; do
	echo "== $t"
	"$build/tests/e2e/$t"
done

echo "== e2e_killloop: $kills kills"
RELIABILITY_KILLS=$kills "$build/tests/e2e/e2e_killloop"

if [ -x scripts/fuzz.sh ]; then
	echo "== fuzzing, ${FUZZ_SECONDS:-600} s per target"
	./scripts/fuzz.sh "${FUZZ_SECONDS:-600}"
fi
echo "reliability-long: all passed"
