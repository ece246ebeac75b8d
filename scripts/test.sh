#!/bin/sh
# Builds receiptd and runs the whole test suite through CTest.
#   scripts/test.sh              the normal build (build/)
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build (build-asan/)
# Installs missing build dependencies first (Debian packages, needs root or
# sudo), so it works on a fresh machine.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh

build=build
opts=""
if [ "${1:-}" = "--sanitize" ]; then
	build=build-asan
	opts="-DRECEIPTD_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"
fi
# shellcheck disable=SC2086
cmake -S . -B "$build" $opts >/dev/null
cmake --build "$build" -j "$(nproc)"
# The Rust producer's test (producer_rust) compiles its crates here once
# for both build trees.
RECEIPTD_CARGO_TARGET_DIR=$(pwd)/build-cargo
export RECEIPTD_CARGO_TARGET_DIR
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
