#!/bin/sh
# CTest test producer_rust: builds the crate offline with Debian's own
# cargo and rustc against Debian's packaged crates (librust-serde-dev,
# librust-rmp-serde-dev, ...: /usr/share/cargo/registry as a directory
# source) and runs `cargo test`: the shared vectors encoded byte for byte,
# and the real daemon with a SIGKILL and restart in the middle of a stream.
#
#   run-tests.sh CARGO RUSTC CRATE_DIR WORK_DIR RECEIPTD VECTORS_DIR
#
# The crate is copied into WORK_DIR (cargo writes Cargo.lock beside
# Cargo.toml, and the source tree stays clean); the build's target
# directory stays there between runs (or in RECEIPTD_CARGO_TARGET_DIR).
# Exits 77 (SKIP) when cargo, rustc, rustfmt or one of the crates is not
# installed.
set -eu

[ $# -eq 6 ] || {
	echo "usage: run-tests.sh CARGO RUSTC CRATE_DIR WORK_DIR RECEIPTD VECTORS_DIR" >&2
	exit 2
}
abs() { (cd "$1" && pwd); }
cargo=$1 rustc=$2
crate=$(abs "$3")
mkdir -p "$4"
work=$(abs "$4")
receiptd=$(abs "$(dirname "$5")")/$(basename "$5")
vectors=$(abs "$6")
registry=/usr/share/cargo/registry

skip() {
	echo "SKIP: $* (scripts/install-deps.sh installs it)" >&2
	exit 77
}
[ -x "$cargo" ] || skip "no Debian cargo"
[ -x "$rustc" ] || skip "no Debian rustc"
for c in serde serde_derive rmp rmp-serde openssl; do
	ls -d "$registry/$c"-[0-9]* >/dev/null 2>&1 || skip "crate $c not in $registry"
done

mkdir -p "$work/cargo-home" "$work/crate"
cat >"$work/cargo-home/config.toml" <<EOT
[source.crates-io]
replace-with = "debian"

[source.debian]
directory = "$registry"

[net]
offline = true
EOT
rm -rf "$work/crate/src" "$work/crate/tests"
cp -R "$crate/Cargo.toml" "$crate/src" "$crate/tests" "$work/crate/"

# Only Debian's toolchain: neither another cargo nor another rustc on
# PATH (a rustup proxy, say) takes part.
CARGO_HOME=$work/cargo-home
# RECEIPTD_CARGO_TARGET_DIR (scripts/test.sh sets it): one target
# directory for every build tree, so the crates compile once, not once for
# the plain build and again for the sanitizer build.
CARGO_TARGET_DIR=${RECEIPTD_CARGO_TARGET_DIR:-$work/target}
RUSTC=$rustc
RUSTFLAGS="-D warnings" # the crate's own warnings are errors, as in C
RUSTDOC=$(dirname "$rustc")/rustdoc
RECEIPTD=$receiptd
RECEIPTD_VECTORS=$vectors
export CARGO_HOME CARGO_TARGET_DIR RUSTC RUSTFLAGS RUSTDOC RECEIPTD RECEIPTD_VECTORS
cd "$work/crate"
"$cargo" --version
"$rustc" --version
# Formatting is checked like clang_format checks the C (Debian's rustfmt).
rustfmt=$(dirname "$rustc")/rustfmt
[ -x "$rustfmt" ] || skip "no Debian rustfmt"
"$rustfmt" --check --edition 2021 src/lib.rs tests/*.rs
exec "$cargo" test --offline -- --test-threads=1 --nocapture
